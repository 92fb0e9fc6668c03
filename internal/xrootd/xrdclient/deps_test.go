package xrdclient

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the transport on the client side: it is embedded with the
// engine in the cache, the transfer service and the CLI, and must not pull
// in the server side (its tests may use wanda's server as a peer).
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/internal/xrootd/server", "/internal/httpserve", "/internal/storage", "/internal/app", "/internal/cli", "/internal/auth", "/internal/locate", "/internal/cache"} {
			if strings.HasSuffix(dep, banned) || strings.Contains(dep, banned+"/") {
				t.Errorf("xrdclient imports %s", dep)
			}
		}
	}
}

package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the client free of server-side packages: it is embedded in
// the cache, the transfer service and the FUSE mount, and must stay small.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/internal/httpserve", "/internal/storage", "/internal/app", "/internal/cli", "/internal/auth"} {
			if strings.HasSuffix(dep, banned) || strings.Contains(dep, banned+"/") {
				t.Errorf("client imports %s", dep)
			}
		}
	}
}

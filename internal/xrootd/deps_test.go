package xrootd

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the wire package free of wanda's server side and of I/O
// helpers: a client transport imports it, and the client must not pull in
// storage or auth (internal/client's deps test).
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/wanda-fed/wanda/") && dep != "github.com/wanda-fed/wanda/internal/xrootd" {
			t.Errorf("the wire package imports %s", dep)
		}
		for _, banned := range []string{"net", "net/http", "crypto/tls"} {
			if dep == banned {
				t.Errorf("the wire package imports %s (it does no I/O)", dep)
			}
		}
	}
}

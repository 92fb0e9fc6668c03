package cms

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the wire package free of wanda's other packages and of
// the network: it decodes bytes and nothing else.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/wanda-fed/wanda/") && dep != "github.com/wanda-fed/wanda/internal/xrootd/cms" {
			t.Errorf("the cms wire package imports %s", dep)
		}
		if dep == "net" || dep == "net/http" {
			t.Errorf("the cms wire package imports %s (it does no network I/O)", dep)
		}
	}
}

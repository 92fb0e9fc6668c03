package cli

import (
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	code, out := run(t, "version")
	_, flag := run(t, "--version")
	if code != 0 || !strings.HasPrefix(out, strings.TrimSpace(flag)+"\n") || !strings.Contains(out, "go1.") {
		t.Fatalf("wanda version: %d %q (--version: %q)", code, out, flag)
	}
}

package interop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// xrdcp --tpc only between two wanda servers built as `wanda server`
// builds them (root:// on the HTTP port, the copier of COPY pulling
// root:// too): the destination pulls, its log says so, the bytes
// arrive; over an existing file the copy is refused and the file kept.
func TestXrdcpThirdPartyCopy(t *testing.T) {
	requireTool(t, "xrdcp")
	srcDir, dstDir := t.TempDir(), t.TempDir()
	data := randomBytes(6<<20+5, 33)
	if err := os.WriteFile(filepath.Join(srcDir, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := func(c *config.Config) { c.Server.TPC.Allow = []string{"127.0.0.0/8"} }
	src := testserver.StartWith(t, testserver.Options{Configure: conf}, config.Export{Prefix: "/store", Path: srcDir})
	dst := testserver.StartWith(t, testserver.Options{Configure: conf}, config.Export{Prefix: "/store", Path: dstDir})
	from, to := "root://"+src.Addr+"//store/f.bin", "root://"+dst.Addr+"//store/sub/g.bin"
	if r := run(t, "", "xrdcp", "--tpc", "only", from, to); r.Err != nil {
		t.Fatalf("xrdcp --tpc only: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	sameBytes(t, "g.bin", readFile(t, filepath.Join(dstDir, "sub", "g.bin")), data)
	if !strings.Contains(dst.Log(), "tpc pull done") {
		t.Errorf("the destination did not log its pull:\n%s", dst.Log())
	}
	if r := run(t, "", "xrdcp", "--tpc", "only", from, to); r.Err == nil {
		t.Errorf("a copy over an existing file succeeded")
	}
	sameBytes(t, "g.bin", readFile(t, filepath.Join(dstDir, "sub", "g.bin")), data)
}

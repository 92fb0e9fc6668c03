package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/tpc"
)

// withCopier makes the server pull with wanda's real copier (package
// tpc), loopback allowed.
func withCopier(t *testing.T) serverOpt {
	c, err := tpc.New(tpc.Options{Allow: []string{"127.0.0.0/8"}, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return withPuller(PullerFunc(c.PullURL))
}

// The same copies as with the test Puller, pulled by tpc.Copier: from
// wanda and from XRootD, refused over an existing file.
func TestTPCCopier(t *testing.T) {
	src := startServer(t)
	dst := startServer(t, withCopier(t))
	data := src.writeFile(t, "f", 9<<20+1)
	mustRun(t, "xrdcp", "--tpc", "only", src.URL("/store/f"), dst.URL("/store/g"))
	sameFile(t, filepath.Join(dst.dir, "g"), data)
	if r := runTool(t, time.Minute, "xrdcp", "--tpc", "only", src.URL("/store/f"), dst.URL("/store/g")); r.err == nil {
		t.Errorf("copy over an existing file succeeded:\n%s", r.out)
	}

	dir := t.TempDir()
	xdata := randomBytes(6<<20+9, 3)
	if err := os.WriteFile(filepath.Join(dir, "x"), xdata, 0o644); err != nil {
		t.Fatal(err)
	}
	xsrc := startXRootDTPC(t, dir, false)
	mustRun(t, "xrdcp", "--tpc", "only", xsrc.URL("/x"), dst.URL("/store/x"))
	sameFile(t, filepath.Join(dst.dir, "x"), xdata)
}

package fedtest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// root:// through the hierarchy: the global redirector answers
// kXR_redirect to the server at the other site (wanda servers speak
// root:// on their HTTP port), and a root:// upload through a site
// redirector lands on a writable server of that site.
func TestRootThroughRedirectors(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true})
	want := payload(2<<20+3, 11)
	f.Put(t, 1, 0, "/store/root/f.bin", want)
	c := client.New()
	xrdclient.Register(c)
	root := func(n *fedtest.Node) string { return "root://" + strings.TrimPrefix(n.URL, "http://") + "/" }

	dst := filepath.Join(t.TempDir(), "f.bin")
	res, err := c.Copy(t.Context(), []string{root(f.Global) + "/store/root/f.bin"}, dst, client.CopyOptions{Streams: 2, Checksum: "adler32"})
	if err != nil || res[0].Error != "" {
		t.Fatalf("root:// copy through the global redirector: %v %+v", err, res)
	}
	got, _ := os.ReadFile(dst)
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	if res[0].Server != f.Server(1, 0).Addr {
		t.Errorf("served by %q, want %s", res[0].Server, f.Server(1, 0).Addr)
	}

	if _, err := c.Copy(t.Context(), []string{dst}, root(f.Sites[0].Redirector)+"/store/root/up.bin", client.CopyOptions{Checksum: "adler32"}); err != nil {
		t.Fatalf("root:// upload through site 0: %v", err)
	}
	n := 0
	for _, s := range f.Sites[0].Servers {
		if b, err := os.ReadFile(s.LocalPath("/store/root/up.bin")); err == nil {
			if d := testserver.DiffBytes(b, want); d != "" {
				t.Fatal(d)
			}
			n++
		}
	}
	if n != 1 {
		t.Errorf("the upload is on %d servers of site 0, want 1", n)
	}
	if _, err := c.Stat(t.Context(), root(f.Global)+"/store/root/missing.bin"); err == nil {
		t.Error("stat of a missing file through the redirector succeeded")
	}
}

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
	rootReadAndUpload(t, c, f, root, "/store/root", want, 0)
	if _, err := c.Stat(t.Context(), root(f.Global)+"/store/root/missing.bin"); err == nil {
		t.Error("stat of a missing file through the redirector succeeded")
	}
}

// rootReadAndUpload copies dir/f.bin (on server 0 of site 1) through the
// global redirector over root:// and checks that server 0 of site 1
// answered with want, then uploads it back as dir/up.bin through the
// redirector of site upSite and checks it landed on one of its servers.
func rootReadAndUpload(t *testing.T, c *client.Client, f *fedtest.Fed, root func(*fedtest.Node) string, dir string, want []byte, upSite int) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "f.bin")
	res, err := c.Copy(t.Context(), []string{root(f.Global) + dir + "/f.bin"}, dst, client.CopyOptions{Streams: 2, Checksum: "adler32"})
	if err != nil || res[0].Error != "" {
		t.Fatalf("root:// copy through the global redirector: %v %+v", err, res)
	}
	got, _ := os.ReadFile(dst)
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	if res[0].Server != f.Server(1, 0).Addr {
		t.Errorf("root:// read served by %q, want %s", res[0].Server, f.Server(1, 0).Addr)
	}
	if _, err := c.Copy(t.Context(), []string{dst}, root(f.Sites[upSite].Redirector)+dir+"/up.bin", client.CopyOptions{Checksum: "adler32"}); err != nil {
		t.Fatalf("root:// upload through site %d: %v", upSite, err)
	}
	n := 0
	for _, s := range f.Sites[upSite].Servers {
		if b, err := os.ReadFile(s.LocalPath(dir + "/up.bin")); err == nil {
			if d := testserver.DiffBytes(b, want); d != "" {
				t.Fatal(d)
			}
			n++
		}
	}
	if n != 1 {
		t.Errorf("the root:// upload is on %d servers of site %d, want 1", n, upSite)
	}
}

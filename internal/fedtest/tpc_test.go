package fedtest_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fedtest"
)

// Third-party copies through redirectors: a COPY sent to a redirector is
// redirected to a member that can run it (a writable one for a pull, a
// holder for a push), and a Source or Destination that is a redirector
// is followed by the member that copies. wanda cp --tpc does both.
func TestThirdPartyCopyThroughRedirectors(t *testing.T) {
	t.Parallel()
	f := fedtest.Start(t, fedtest.Options{Global: true,
		ReadOnly: func(site, server int) bool { return site == 1 && server == 0 },
		Server: func(_, _ int, c *config.Config) {
			c.Server.TPC.Allow = []string{"127.0.0.0/8", "::1/128"}
		}})
	want := payload(5<<20+7, 9)
	f.Put(t, 0, 0, "/store/tpc/src.bin", want)
	f.WaitSettled(t)

	// The raw COPY: a pull to site1 goes to its writable member, a push
	// from the global redirector to the holder.
	a := do(t, "COPY", f.Sites[1].Redirector.URL+"/store/tpc/x", http.Header{"Source": {f.Global.URL + "/store/tpc/src.bin"}})
	if loc := redirectTo(t, a); loc.Host != f.Server(1, 1).Addr {
		t.Fatalf("pull COPY redirected to %s, want the writable %s", loc.Host, f.Server(1, 1).Addr)
	}
	a = do(t, "COPY", f.Global.URL+"/store/tpc/src.bin", http.Header{"Destination": {f.Sites[1].Redirector.URL + "/store/tpc/x"}})
	if loc := redirectTo(t, a); loc.Host != f.Server(0, 0).Addr {
		t.Fatalf("push COPY redirected to %s, want the holder %s", loc.Host, f.Server(0, 0).Addr)
	}

	c := engine()
	for _, mode := range []string{client.TPCPull, client.TPCPush, client.TPCAuto} {
		dst := f.Sites[1].Redirector.URL + "/store/tpc/" + mode + ".bin"
		res, err := c.Copy(t.Context(), []string{f.Global.URL + "/store/tpc/src.bin"}, dst, client.CopyOptions{TPC: mode, Checksum: "adler32", Streams: 4})
		if err != nil {
			t.Fatalf("--tpc %s: %v", mode, err)
		}
		wantMode := mode
		if mode == client.TPCAuto {
			wantMode = client.TPCPull
		}
		if r := res[0]; r.Mode != wantMode || !r.Verified || r.Bytes != int64(len(want)) {
			t.Errorf("--tpc %s: mode %q verified %v bytes %d", mode, r.Mode, r.Verified, r.Bytes)
		}
		got, err := os.ReadFile(filepath.Join(f.Server(1, 1).Export, "tpc", mode+".bin"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("--tpc %s: the writable member of site1 holds %d bytes (%v), want the source's %d", mode, len(got), err, len(want))
		}
	}

	// A server without loopback allowed: auto falls back to streaming
	// through this host, and says so.
	g := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 2})
	g.Put(t, 0, 0, "/store/s.bin", want)
	res, err := c.Copy(t.Context(), []string{g.Server(0, 0).URL + "/store/s.bin"}, g.Server(0, 1).URL+"/store/s.bin", client.CopyOptions{Checksum: "auto"})
	if err != nil || res[0].Mode != "stream" {
		t.Fatalf("auto with TPC refused: mode %q, %v", res[0].Mode, err)
	}
	_, err = c.Copy(t.Context(), []string{g.Server(0, 0).URL + "/store/s.bin"}, g.Server(0, 1).URL+"/store/t.bin", client.CopyOptions{TPC: client.TPCPull})
	if err == nil || !strings.Contains(err.Error(), "--tpc-allow") {
		t.Fatalf("--tpc pull with TPC refused: %v, want the server's reason", err)
	}
}

package interop

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// needIPv6 skips (fails in CI) when the machine has no IPv6 loopback.
func needIPv6(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		missing(t, "no IPv6 loopback: "+err.Error())
	}
	ln.Close()
}

// curl -g and xrdcp/xrdfs against a wanda server on [::1]: download,
// range, upload, listing and locate (whose answer must name the server
// as [::1]:port); and curl -g over HTTPS on [::1].
func TestIPv6Server(t *testing.T) {
	needIPv6(t)
	requireTool(t, "curl")
	requireTool(t, "xrdcp")
	requireTool(t, "xrdfs")
	store := demoData(t)
	scratch := t.TempDir()
	srv := testserver.StartWith(t, testserver.Options{Host: "::1"},
		config.Export{Prefix: "/store", Path: store, ReadOnly: true},
		config.Export{Prefix: "/scratch", Path: scratch})
	if !strings.HasPrefix(srv.URL, "http://[::1]:") {
		t.Fatalf("server URL %s, want http://[::1]:port", srv.URL)
	}
	file := readFile(t, filepath.Join(store, "data/file-1m.bin"))

	r := curl(t, "-g", srv.URL+"/store/data/file-1m.bin")
	if r.Status != http.StatusOK {
		t.Fatalf("curl -g: status %d", r.Status)
	}
	sameBytes(t, "curl -g", r.Body, file)
	r = curl(t, "-g", "-r", "100-199", srv.URL+"/store/data/file-1m.bin")
	if r.Status != http.StatusPartialContent {
		t.Fatalf("curl -g -r: status %d", r.Status)
	}
	sameBytes(t, "curl -g -r", r.Body, file[100:200])
	local := t.TempDir()
	up := filepath.Join(local, "up.bin")
	if err := os.WriteFile(up, randomBytes(2<<20+3, 61), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(t, "-g", "-T", up, srv.URL+"/scratch/curl.bin"); r.Status != http.StatusCreated {
		t.Fatalf("curl -g -T: status %d", r.Status)
	}
	sameBytes(t, "curl -g -T", readFile(t, filepath.Join(scratch, "curl.bin")), readFile(t, up))

	root := rootURL(srv.URL)
	dst := filepath.Join(local, "x.bin")
	mustRun(t, local, "xrdcp", "-f", root+"/store/data/file-1m.bin", dst)
	sameBytes(t, "xrdcp from [::1]", readFile(t, dst), file)
	mustRun(t, local, "xrdcp", "-f", up, root+"/scratch/xrdcp.bin")
	sameBytes(t, "xrdcp to [::1]", readFile(t, filepath.Join(scratch, "xrdcp.bin")), readFile(t, up))
	if out := mustRun(t, local, "xrdfs", srv.Addr, "ls", "-l", "/store/data").Stdout; !bytes.Contains(out, []byte("file-1m.bin")) {
		t.Errorf("xrdfs ls -l: %s", out)
	}
	if out := mustRun(t, local, "xrdfs", srv.Addr, "locate", "/store/data/file-1m.bin").Stdout; !bytes.Contains(out, []byte(srv.Addr)) {
		t.Errorf("xrdfs locate: %q, want %s", out, srv.Addr)
	}

	// HTTPS on [::1], the certificate naming ::1.
	tc := testcert.New(t)
	certFile, keyFile := filepath.Join(local, "cert.pem"), filepath.Join(local, "key.pem")
	if err := os.WriteFile(certFile, tc.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, tc.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tlsSrv := testserver.StartWith(t, testserver.Options{Host: "::1", Configure: func(c *config.Config) {
		c.Server.TLS = config.TLS{Cert: certFile, Key: keyFile}
	}}, config.Export{Prefix: "/store", Path: store, ReadOnly: true})
	r = curl(t, "-g", "--cacert", certFile, tlsSrv.URL+"/store/data/file-1m.bin")
	if r.Status != http.StatusOK || !strings.HasPrefix(tlsSrv.URL, "https://[::1]:") {
		t.Fatalf("curl -g %s: status %d", tlsSrv.URL, r.Status)
	}
	sameBytes(t, "curl -g over HTTPS", r.Body, file)
}

// A federation on [::1]: curl -g -L follows the redirectors' 307 to the
// member (bracketed Location), xrdcp follows kXR_redirect to an IPv6
// member for a read through the global redirector and for an upload
// through a site redirector, xrdfs locate on a redirector lists the
// members as [::1]:port, and a cache on [::1] joins a redirector and
// serves curl and xrdcp from the federation.
func TestIPv6Federation(t *testing.T) {
	needIPv6(t)
	requireTool(t, "curl")
	requireTool(t, "xrdcp")
	requireTool(t, "xrdfs")
	f := fedtest.Start(t, fedtest.Options{Global: true, Host: func(string) string { return "::1" }})
	want := randomBytes(3<<20+1, 62)
	f.Put(t, 1, 1, "/store/v6/at-site-1.bin", want)
	holder := f.Server(1, 1)

	r := curl(t, "-g", f.Global.URL+"/store/v6/at-site-1.bin")
	if r.Status != http.StatusTemporaryRedirect || !strings.HasPrefix(r.Header.Get("Location"), holder.URL+"/") {
		t.Errorf("curl -g: %d, Location %q; want 307 to %s", r.Status, r.Header.Get("Location"), holder.URL)
	}
	r = curl(t, "-g", "-L", f.Sites[0].Redirector.URL+"/store/v6/at-site-1.bin")
	if r.Status != http.StatusOK {
		t.Fatalf("curl -g -L through site 0: status %d", r.Status)
	}
	sameBytes(t, "curl -g -L through site 0", r.Body, want)

	local := t.TempDir()
	dst := filepath.Join(local, "x.bin")
	// A redirector holds no data: the bytes came from the member it
	// sent xrdcp to, which counts the open.
	mustRun(t, local, "xrdcp", "-f", rootURL(f.Global.URL)+"/store/v6/at-site-1.bin", dst)
	sameBytes(t, "xrdcp through the global redirector", readFile(t, dst), want)
	if n := holder.Metric("wanda_xrootd_requests_total", "request", "kXR_open", "result", "ok"); n < 1 {
		t.Errorf("the holder answered %v root:// opens, want the redirected xrdcp's", n)
	}
	mustRun(t, local, "xrdcp", "-f", dst, rootURL(f.Sites[0].Redirector.URL)+"/store/v6/up.bin")
	n := 0
	for _, s := range f.Sites[0].Servers {
		if b, err := os.ReadFile(s.LocalPath("/store/v6/up.bin")); err == nil {
			sameBytes(t, "xrdcp upload through site 0", b, want)
			n++
		}
	}
	if n != 1 {
		t.Errorf("the xrdcp upload is on %d servers of site 0, want 1", n)
	}
	out := mustRun(t, local, "xrdfs", f.Global.Addr, "locate", "/store/v6/at-site-1.bin").Stdout
	if !bytes.Contains(out, []byte(holder.Addr)) {
		t.Errorf("xrdfs locate through the global redirector: %q, want %s", out, holder.Addr)
	}

	// A cache on [::1] reading from the global redirector, a member of
	// site 0.
	cache := startCache6(t, f.Global.URL, f.Sites[0].Redirector.URL)
	f.WaitMembers(t, f.Sites[0].Redirector, 3)
	r = curl(t, "-g", cache+"/store/v6/at-site-1.bin")
	if r.Status != http.StatusOK {
		t.Fatalf("curl -g through the cache: status %d", r.Status)
	}
	sameBytes(t, "curl -g through the cache", r.Body, want)
	mustRun(t, local, "xrdcp", "-f", rootURL(cache)+"/store/v6/at-site-1.bin", dst)
	sameBytes(t, "xrdcp through the cache", readFile(t, dst), want)
}

// startCache6 runs a cache on [::1] in front of upstream, joined to the
// redirector join, until the test ends, and returns its URL.
func startCache6(t *testing.T, upstream, join string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	cfg := config.Default()
	cfg.Cache.Upstream = upstream
	cfg.Cache.Dir = t.TempDir()
	cfg.Cache.Listen = ln.Addr().String()
	cfg.Cache.ShutdownTimeout = cacheShutdownTimeout
	cfg.Cache.Federation.Join = []string{join}
	cfg.Cache.Federation.Advertise = u
	cfg.Cache.Federation.Heartbeat = fedtest.DefaultHeartbeat
	logs := &testserver.LogBuffer{}
	c, err := app.NewCache(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), prometheus.NewRegistry())
	if err != nil {
		ln.Close()
		t.Fatalf("app.NewCache: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cache on [::1]: %v", err)
		}
		c.Close()
		if t.Failed() {
			t.Logf("cache log:\n%s", logs.String())
		}
	})
	waitFor(t, 10*time.Second, "the cache on [::1] to answer /healthz", func() bool {
		resp, err := httpClient.Get(u + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return u
}

package app_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
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
	"github.com/wanda-fed/wanda/internal/testcert"
)

func newConfig(t *testing.T) (config.Config, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Server.Exports = []config.Export{{Prefix: "/data", Path: dir}}
	cfg.Server.ShutdownTimeout = 10 * time.Second
	return cfg, dir
}

// start serves cfg on a fresh loopback listener and returns the base URL,
// the cancel that begins shutdown, and a channel with Serve's result.
func start(t *testing.T, cfg config.Config) (string, context.CancelFunc, func() error) {
	t.Helper()
	srv, err := app.NewServer(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var serveErr error
	go func() { serveErr = srv.Serve(ctx, ln); close(stopped) }()
	wait := func() error {
		select {
		case <-stopped:
			return serveErr
		case <-time.After(15 * time.Second):
			return errors.New("server did not stop within 15s")
		}
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), cancel, wait
}

func TestGracefulShutdownFinishesInFlightUpload(t *testing.T) {
	cfg, dir := newConfig(t)
	addr, cancel, wait := start(t, cfg)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/data/slow.bin", pr)
	req.ContentLength = 8
	res := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			res <- nil
			return
		}
		res <- resp
	}()
	if _, err := pw.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	// The upload is in flight (its temp file exists); begin shutdown.
	waitFor(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, ".wanda-upload.*"))
		return len(m) == 1
	})
	cancel()
	// New connections are refused once the listener is closed.
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if _, err := pw.Write([]byte("done")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	resp := <-res
	if resp == nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("in-flight upload: %+v", resp)
	}
	resp.Body.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "slow.bin")); string(b) != "halfdone" {
		t.Fatalf("file = %q", b)
	}
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestTLS(t *testing.T) {
	cfg, dir := newConfig(t)
	tc := testcert.New(t)
	certPEM, keyPEM := tc.CertPEM, tc.KeyPEM
	cfg.Server.TLS = config.TLS{Cert: writeFile(t, "cert.pem", certPEM), Key: writeFile(t, "key.pem", keyPEM)}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + addr + "/data/f")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "secret" || resp.TLS == nil {
		t.Fatalf("status %d body %q tls %v", resp.StatusCode, b, resp.TLS != nil)
	}
	// Plain HTTP to a TLS port is not served as data.
	if r, err := http.Get("http://" + addr + "/data/f"); err == nil {
		if r.StatusCode == 200 {
			t.Fatal("plain HTTP served on a TLS port")
		}
		r.Body.Close()
	}
}

func TestMetricsAndHealth(t *testing.T) {
	cfg, dir := newConfig(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	for _, p := range []string{"/data/f", "/data/missing"} {
		r, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	body := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{
		`wanda_http_requests_total{code="200",method="GET",role="server"} 1`,
		`wanda_http_requests_total{code="404",method="GET",role="server"} 1`,
		`wanda_http_sent_bytes_total`, `wanda_http_request_duration_seconds_bucket`,
		`wanda_http_open_connections`, `wanda_http_requests_in_flight`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if h := get(t, "http://"+addr+"/healthz"); h != "ok\n" {
		t.Errorf("healthz = %q", h)
	}
}

func TestNewServerRejectsBadConfig(t *testing.T) {
	cfg := config.Default()
	if _, err := app.NewServer(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), "server.exports") {
		t.Fatalf("err = %v", err)
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	r, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func writeFile(t *testing.T, name string, b []byte) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

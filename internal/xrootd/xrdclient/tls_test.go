package xrdclient

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
	"github.com/wanda-fed/wanda/internal/xrootd/server"
)

// tlsConns counts the pooled connections that are and are not TLS.
func tlsConns(tr *Transport) (withTLS, plain int) {
	tr.pool.mu.Lock()
	defer tr.pool.mu.Unlock()
	for _, cs := range tr.pool.idle {
		for _, c := range cs {
			if c.tls {
				withTLS++
			} else {
				plain++
			}
		}
	}
	return withTLS, plain
}

// testTLS: roots:// downloads and uploads go over TLS; root:// to the
// same server stays plain.
func testTLS(t *testing.T, p peer, pool *x509.CertPool) {
	c := client.New()
	c.Policy.Stall = 20 * time.Second
	tr := New(Options{TLS: &tls.Config{RootCAs: pool}, Log: c.Log})
	c.Register("root", tr)
	c.Register("roots", tr)
	t.Cleanup(tr.CloseIdle)
	ctx := testCtx(t)
	data := randomBytes(6<<20+5, 31)
	p.writeFile(t, "/data/f", data)
	secure := "roots" + p.URL("/data/f")[len("root"):]

	dst := filepath.Join(t.TempDir(), "f")
	if _, err := c.Copy(ctx, []string{secure}, dst, client.CopyOptions{Streams: 3, Checksum: "adler32", ChunkMin: 1 << 20, ChunkMax: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatal("bytes differ")
	}
	src := filepath.Join(t.TempDir(), "up")
	if err := os.WriteFile(src, data[:3<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Copy(ctx, []string{src}, "roots"+p.URL("/data/up")[len("root"):], client.CopyOptions{Checksum: "adler32"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p.Path("/data/up")); !bytes.Equal(got, data[:3<<20]) {
		t.Fatal("uploaded bytes differ")
	}
	if n, plain := tlsConns(tr); n == 0 || plain != 0 {
		t.Errorf("%d TLS and %d plain connections pooled after roots:// transfers", n, plain)
	}
	tr.CloseIdle()
	if _, err := c.Stat(ctx, p.URL("/data/f")); err != nil {
		t.Fatal(err)
	}
	if n, plain := tlsConns(tr); n != 0 || plain != 1 {
		t.Errorf("root:// to a TLS-capable server: %d TLS and %d plain connections", n, plain)
	}
}

func TestTLS(t *testing.T) {
	tc := testcert.New(t)
	cert, certPEM, keyPEM, pool := tc.Cert, tc.CertPEM, tc.KeyPEM, tc.Pool
	t.Run("wanda", func(t *testing.T) {
		p := startWandaWith(t, func(o *server.Options) { o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}} })
		testTLS(t, p, pool)
	})
	t.Run("xrootd", func(t *testing.T) {
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		for f, b := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
			if err := os.WriteFile(f, b, 0o400); err != nil {
				t.Fatal(err)
			}
		}
		// xrdpeer gives the files to the daemon's user and adds
		// `xrd.tls CERT KEY` and `xrd.tlsca noverify`.
		p := startXRootDWith(t, xrdpeer.Options{TLSCert: certFile, TLSKey: keyFile})
		testTLS(t, p, pool)
	})
}

// TestTLSUnavailable: roots:// to a server without TLS fails at once,
// not retried, rather than going plain.
func TestTLSUnavailable(t *testing.T) {
	p := startWanda(t)
	c, _ := newClient(t)
	start := time.Now()
	_, err := c.Stat(testCtx(t), "roots"+p.URL("/data/f")[len("root"):])
	if !errors.Is(err, errNoTLS) {
		t.Fatalf("got %v, want errNoTLS", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v: retried?", d)
	}
}

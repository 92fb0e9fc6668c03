package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
)

// WithClientCert: each operation presents its own certificate, over
// connections of its own (a connection authenticated as alice never
// carries bob's request, nor the client's own); without one, the
// client's own is presented.
func TestWithClientCert(t *testing.T) {
	pair := func(cn string) *tls.Certificate {
		leaf, inter, key := userChain(t, cn)
		c, err := tls.X509KeyPair(append(leaf, inter...), key)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	alice, bob, own := pair("alice"), pair("bob"), pair("service")
	var mu sync.Mutex
	conns := map[string]string{} // remote address -> the CN it authenticated
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		mu.Lock()
		if was, ok := conns[r.RemoteAddr]; ok && was != cn {
			cn = "connection of " + was + " reused for " + cn
		}
		conns[r.RemoteAddr] = cn
		mu.Unlock()
		fmt.Fprint(w, cn)
	}))
	hs.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	hs.StartTLS()
	defer hs.Close()
	roots := hs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	cl := client.New()
	cl.HTTP = client.NewHTTPTransport(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{*own}})
	cl.Register("https", cl.HTTP)
	get := func(ctx context.Context) string {
		var buf bytes.Buffer
		if _, err := cl.Get(ctx, hs.URL+"/f", &buf, ""); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	bg := context.Background()
	for range 3 {
		for _, c := range []struct {
			ctx  context.Context
			want string
		}{
			{client.WithClientCert(bg, "alice", alice), "alice"},
			{client.WithClientCert(bg, "bob", bob), "bob"},
			{bg, "service"},
		} {
			if got := get(c.ctx); got != c.want {
				t.Fatalf("presented %q, want %q", got, c.want)
			}
		}
	}
	// A new certificate under the same name replaces the old one.
	if got := get(client.WithClientCert(bg, "alice", bob)); got != "bob" {
		t.Fatalf("a new certificate under alice's name: %q", got)
	}
}

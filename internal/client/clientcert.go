package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sync"
)

// A TLS client certificate per operation, carried by its context: a
// transfer service moves a user's job with the proxy the user delegated
// to it, presented to both ends of the transfer (and, in a third-party
// copy, to the server that runs it) instead of the client's own
// certificate.
//
// Connections are pooled per credential: each credential gets its own
// http.Transport (a clone of the client's, with its dialer, filter and
// CAs), so a connection authenticated with one user's proxy never
// carries another user's request. The transports are kept for the
// credentials used last, at most maxCertClients of them.

type clientCert struct {
	name string
	cert *tls.Certificate
}

type clientCertKey struct{}

// WithClientCert returns a context whose HTTPS requests present cert as
// their TLS client certificate in place of the client's own. name
// identifies the credential (a delegation id): a new cert under the
// same name (a proxy delegated again) replaces the old one's
// connections.
func WithClientCert(ctx context.Context, name string, cert *tls.Certificate) context.Context {
	return context.WithValue(ctx, clientCertKey{}, &clientCert{name: name, cert: cert})
}

func clientCertFrom(ctx context.Context) *clientCert {
	c, _ := ctx.Value(clientCertKey{}).(*clientCert)
	return c
}

// maxCertClients bounds the transports kept for per-operation
// certificates; past it, the one used least recently is closed.
const maxCertClients = 32

// certClients are an HTTPTransport's clients per credential.
type certClients struct {
	mu   sync.Mutex
	m    map[string]*certClientEntry
	tick uint64
}

type certClientEntry struct {
	leaf []byte // the certificate's DER, to notice a new one
	hc   *http.Client
	used uint64
}

// clientFor is the HTTP client for a request under ctx: the transport's
// own, or the one of the context's certificate.
func (t *HTTPTransport) clientFor(ctx context.Context) (*http.Client, error) {
	cc := clientCertFrom(ctx)
	if cc == nil {
		return t.Client, nil
	}
	if cc.cert == nil || len(cc.cert.Certificate) == 0 {
		return nil, fmt.Errorf("the credential %s has no certificate", cc.name)
	}
	cs := &t.certs
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.tick++
	leaf := cc.cert.Certificate[0]
	if e, ok := cs.m[cc.name]; ok && bytes.Equal(e.leaf, leaf) {
		e.used = cs.tick
		return e.hc, nil
	}
	base, ok := t.Client.Transport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("a per-job client certificate needs an *http.Transport, not %T", t.Client.Transport)
	}
	tr := base.Clone()
	tc := &tls.Config{}
	if tr.TLSClientConfig != nil {
		tc = tr.TLSClientConfig.Clone()
	}
	cert := cc.cert
	tc.Certificates = nil
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	tr.TLSClientConfig = tc
	hc := &http.Client{Transport: tr, CheckRedirect: t.Client.CheckRedirect, Timeout: t.Client.Timeout}
	if cs.m == nil {
		cs.m = map[string]*certClientEntry{}
	}
	if old, ok := cs.m[cc.name]; ok {
		old.hc.CloseIdleConnections()
	}
	cs.m[cc.name] = &certClientEntry{leaf: leaf, hc: hc, used: cs.tick}
	if len(cs.m) > maxCertClients {
		var oldest string
		for name, e := range cs.m {
			if oldest == "" || e.used < cs.m[oldest].used {
				oldest = name
			}
		}
		cs.m[oldest].hc.CloseIdleConnections()
		delete(cs.m, oldest)
	}
	return hc, nil
}

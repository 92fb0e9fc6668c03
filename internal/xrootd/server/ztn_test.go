package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	tokens "github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/xrootd"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// tokenServer is a root:// server with TLS whose policy trusts is (base
// /store, no anonymous reads) and other (base "/"), with offline keys.
type tokenServer struct {
	*testServer
	is, other *authtest.Issuer
	cert      testcert.Pair
	caDir     string // the CA as XrdCl finds it (X509_CERT_DIR)
}

// opts are applied after the token options (a test may wrap o.Auth).
func startTokenServer(t *testing.T, anonRead bool, opts ...serverOpt) *tokenServer {
	t.Helper()
	is, other := authtest.NewIssuer(t), authtest.NewIssuerAlg(t, "RS256")
	v, err := tokens.New(tokens.Config{
		Issuers: []tokens.Issuer{
			{URL: is.URL, BasePath: "/store", JWKSFile: is.JWKSFile(t)},
			{URL: other.URL, JWKSFile: other.JWKSFile(t)},
		},
		Audiences: []string{authtest.Audience},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	pol := &auth.Policy{Tokens: v, Rules: []auth.Rule{{Prefix: "/", AnonymousRead: anonRead}}}
	cert := testcert.New(t)
	ts := startServer(t, append([]serverOpt{func(o *Options) {
		o.Auth, o.Bearer, o.TLS, o.TLSLogin = pol, pol.VerifyBearer, cert.ServerConfig(), true
	}}, opts...)...)
	if err := os.WriteFile(filepath.Join(ts.dir, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &tokenServer{testServer: ts, is: is, other: other, cert: cert, caDir: caDir(t, cert.CertPEM)}
}

// caDir is a directory holding the CA under its OpenSSL subject hash.
func caDir(t *testing.T, caPEM []byte) string {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	hash, err := exec.Command(requireTool(t, "openssl"), "x509", "-hash", "-noout", "-in", ca).Output()
	if err != nil {
		t.Fatalf("openssl x509 -hash: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, strings.TrimSpace(string(hash))+".0"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestZtnWire(t *testing.T) {
	for _, tok := range []string{"a", "eyJhbGciOi.x.y", strings.Repeat("t", xrootd.ZtnMaxToken)} {
		got, msg := xrootd.ParseZtn(xrootd.ZtnCredentials(tok))
		if got != tok || msg != "" {
			t.Fatalf("round trip of %d bytes: %q %q", len(tok), got[:min(len(got), 8)], msg)
		}
	}
	good := xrootd.ZtnCredentials("tok")
	bad := map[string][]byte{
		"too short":         good[:5],
		"not ztn":           append([]byte("gsi\x00"), good[4:]...),
		"version mismatch":  append(append(append([]byte(nil), good[:4]...), 1), good[5:]...),
		"not a token":       append(append(append([]byte(nil), good[:5]...), 'S'), good[6:]...),
		"longer":            good[:len(good)-2],
		"missing NUL":       append(good[:len(good)-1:len(good)-1], 'x'),
		"NUL inside":        xrootd.ZtnCredentials("a\x00b"),
		"empty token":       xrootd.ZtnCredentials(""),
		"token too large":   xrootd.ZtnCredentials(strings.Repeat("t", xrootd.ZtnMaxToken+1)),
		"nothing but a hdr": good[:10],
	}
	for name, b := range bad {
		if tok, msg := xrootd.ParseZtn(b); msg == "" || tok != "" {
			t.Errorf("%s: accepted (%q)", name, tok)
		}
	}
	if n, ok := xrootd.ParseZtnParams(xrootd.ZtnParams); !ok || n != xrootd.ZtnMaxToken {
		t.Fatalf("params %q: %d %v", xrootd.ZtnParams, n, ok)
	}
}

func FuzzParseZtn(f *testing.F) {
	f.Add(xrootd.ZtnCredentials("tok"))
	f.Add([]byte("ztn\x00\x00T\x00\x00\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, msg := xrootd.ParseZtn(b)
		if msg == "" && (tok == "" || strings.Contains(tok, "\x00")) {
			t.Fatalf("accepted %q", tok)
		}
	})
}

// TestZtnRaw: ztn is offered with unix after it, refused over plain TCP,
// checked at kXR_auth, and the token reaches the Authorizer.
func TestZtnRaw(t *testing.T) {
	ts := startTokenServer(t, true)
	good := ts.is.Token(t, "storage.read:/", nil)

	rc := dialRaw(t, ts.addr)
	rc.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion}.Body(), nil)
	b := rc.mustOK(xrootd.ReqLogin, xrootd.LoginRequest{PID: 1, Username: [8]byte{'t'}, CapVer: xrootd.LoginVersion5}.Body(), nil)
	lr, err := xrootd.DecodeLoginResponse(b)
	if err != nil || lr.Security != "&P=ztn,"+xrootd.ZtnParams+"&P=unix" {
		t.Fatalf("login security %q (%v)", lr.Security, err)
	}
	var ar xrootd.AuthRequest
	copy(ar.CredType[:], "ztn")
	if msg := rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqAuth, ar.Body(), xrootd.ZtnCredentials(good)); !strings.Contains(msg, "TLS only") {
		t.Fatalf("ztn over plain TCP: %q", msg)
	}
	// Anonymous on a plain connection: a refusal says where tokens go.
	rc.mustOK(xrootd.ReqAuth, xrootd.AuthRequest{CredType: [4]byte{'u', 'n', 'i', 'x'}}.Body(), []byte("unix\x00t t\x00"))
	if msg := rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqMkdir, xrootd.MkdirRequest{}.Body(), []byte("/store/d")); !strings.Contains(msg, "a credential is needed") || !strings.Contains(msg, "use roots://") {
		t.Fatalf("anonymous mkdir over plain TCP: %q", msg)
	}

	// A client able to do TLS is switched before login (kXR_tlsLogin).
	rc = ts.tlsLogin(t)
	expired := ts.is.Token(t, "storage.read:/", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})
	if msg := rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqAuth, ar.Body(), xrootd.ZtnCredentials(expired)); !strings.Contains(msg, "invalid token: token expired") || strings.Contains(msg, expired[:30]) {
		t.Fatalf("expired token: %q", msg)
	}
	if msg := rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqAuth, ar.Body(), []byte("ztn\x00\x00T\x00\x00\x00")); !strings.Contains(msg, "malformed") {
		t.Fatalf("malformed credentials: %q", msg)
	}
	rc.mustOK(xrootd.ReqAuth, ar.Body(), xrootd.ZtnCredentials(good))
	h := rc.open("/store/f.txt", xrootd.OpenRead)
	if got := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Length: 100}.Body(), nil); string(got) != "hello\n" {
		t.Fatalf("read: %q", got)
	}
	// The read-only token cannot write.
	if msg := rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqMkdir, xrootd.MkdirRequest{}.Body(), []byte("/store/d")); !strings.Contains(msg, "does not grant storage.create:/d") {
		t.Fatalf("mkdir with a read token: %q", msg)
	}
}

// tlsDial connects as a root:// client able to do TLS (expecting to
// log in, or to bind) and checks it is switched to TLS (kXR_gotoTLS with
// kXR_tlsLogin).
func (ts *tokenServer) tlsDial(t *testing.T, expect byte) *rawClient {
	t.Helper()
	rc := dialRaw(t, ts.addr)
	b := rc.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion, Flags: xrootd.ProtoAbleTLS, Expect: expect}.Body(), nil)
	if p, _ := xrootd.DecodeProtocolResponse(b); p.Flags&xrootd.FlagGotoTLS == 0 || p.Flags&xrootd.FlagTLSLogin == 0 {
		t.Fatalf("flags %x: no kXR_gotoTLS|kXR_tlsLogin", p.Flags)
	}
	tc := tls.Client(rc.c, &tls.Config{RootCAs: ts.cert.Pool, ServerName: "127.0.0.1"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	rc.c = tc
	return rc
}

// tlsLogin is tlsDial and kXR_login; the session is not authenticated
// yet.
func (ts *tokenServer) tlsLogin(t *testing.T) *rawClient {
	t.Helper()
	rc := ts.tlsDial(t, xrootd.ExpectLogin)
	b := rc.mustOK(xrootd.ReqLogin, xrootd.LoginRequest{PID: 1, Username: [8]byte{'t'}, CapVer: xrootd.LoginVersion5}.Body(), nil)
	lr, err := xrootd.DecodeLoginResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	rc.sess = lr.Session
	return rc
}

// wandaClient is wanda's root:// transport with a token and the test CA.
func wandaClient(ts *tokenServer, tok string) *xrdclient.Transport {
	return xrdclient.New(xrdclient.Options{
		TLS:   &tls.Config{RootCAs: ts.cert.Pool},
		Token: func() (string, error) { return tok, nil },
	})
}

// TestZtnHostileTokens runs the hostile-token suite over roots:// with
// wanda's client: every token refused with its reason, and nothing
// written or deleted.
func TestZtnHostileTokens(t *testing.T) {
	ts := startTokenServer(t, false)
	cases := authtest.HostileTokens(t, ts.is, ts.other)
	ctx := context.Background()
	for _, c := range cases {
		xc := wandaClient(ts, c.Token)
		u := strings.Replace(ts.URL(c.Path), "root://", "roots://", 1)
		want := c.Reason
		if c.Op == "write" {
			// Writes are kXR_mkdir of PATH.d: the scope a refusal
			// names is that directory's.
			want = reasonForMkdir(c)
		}
		if c.Name == "oversized" {
			// wanda's client does not send a token the server said
			// is too large for it.
			want = "larger than the server takes"
		}
		var err error
		switch c.Op {
		case "read":
			_, err = xc.Stat(ctx, mustParse(t, u), nil, false)
		case "write":
			err = xc.Mkdir(ctx, mustParse(t, u+".d"))
		case "delete":
			err = xc.Remove(ctx, mustParse(t, u))
		}
		xc.CloseIdle()
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want success", c.Name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", c.Name, err, want)
		}
		if err != nil && len(c.Token) > 40 && strings.Contains(err.Error(), c.Token[len(c.Token)-30:]) {
			t.Errorf("%s: the token is in the error", c.Name)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ts.dir, "f.txt")); err != nil || string(b) != "hello\n" {
		t.Fatalf("f.txt: %q %v", b, err)
	}
}

// reasonForMkdir is what a refused write says when the test writes by
// kXR_mkdir of PATH.d (the scope then names PATH.d).
func reasonForMkdir(c authtest.Hostile) string {
	if c.Op != "write" {
		return c.Reason
	}
	switch {
	case c.Status == 401:
		return c.Reason
	case strings.Contains(c.Reason, "may create new files"):
		return "" // mkdir of a new name is allowed to a create token
	}
	if i := strings.Index(c.Reason, "storage.create:"); i >= 0 {
		return c.Reason[i:] + ".d"
	}
	return c.Reason
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// recorder is an Authorizer that remembers every request, then asks next.
type recorder struct {
	next auth.Authorizer
	mu   sync.Mutex
	reqs []auth.Request
}

func (r *recorder) Authorize(ctx context.Context, req auth.Request) error {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.next.Authorize(ctx, req)
}

// take returns the requests recorded since the last take.
func (r *recorder) take() []auth.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// record wraps the server's Authorizer in rec.
func record(rec *recorder) serverOpt {
	return func(o *Options) { rec.next, o.Auth = o.Auth, rec }
}

// allBear fails unless there are requests and every one carries tok (a
// failure says so without printing the token).
func allBear(t *testing.T, what string, reqs []auth.Request, tok string) {
	t.Helper()
	if len(reqs) == 0 {
		t.Fatalf("%s: the Authorizer was asked nothing", what)
	}
	for _, r := range reqs {
		if r.Bearer != tok {
			t.Fatalf("%s: %s %s reached the Authorizer with a %d-byte bearer, want the session's %d-byte token", what, r.Op, r.Path, len(r.Bearer), len(tok))
		}
	}
}

// TestZtnBoundConnection: the token of a session goes with the requests
// of every connection bound to it (xrdcp --streams), TLS or not, and
// neither a bound connection nor the authenticated main one can change
// the session's credential with another kXR_auth.
func TestZtnBoundConnection(t *testing.T) {
	rec := &recorder{}
	ts := startTokenServer(t, false, record(rec))
	tok := ts.is.Token(t, "storage.read:/", nil)
	var ar xrootd.AuthRequest
	copy(ar.CredType[:], "ztn")

	main := ts.tlsLogin(t)
	main.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqStat, [16]byte{}, []byte("/store/f.txt"))
	main.mustOK(xrootd.ReqAuth, ar.Body(), xrootd.ZtnCredentials(tok))
	h := main.open("/store/f.txt", xrootd.OpenRead)

	sub := ts.tlsDial(t, xrootd.ExpectBind)
	sub.mustOK(xrootd.ReqBind, main.sess.Body(), nil)
	// A connection unable to do TLS stays plain, and may bind too: it
	// carries data, never the token.
	plain := dialRaw(t, ts.addr)
	plain.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion, Expect: xrootd.ExpectBind}.Body(), nil)
	plain.mustOK(xrootd.ReqBind, main.sess.Body(), nil)
	for name, rc := range map[string]*rawClient{"TLS": sub, "plain": plain} {
		rc.mustOK(xrootd.ReqStat, [16]byte{}, []byte("/store/f.txt"))
		if got := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Length: 100}.Body(), nil); string(got) != "hello\n" {
			t.Fatalf("%s bound connection: read %q", name, got)
		}
		// No other credential through a bound connection.
		rc.mustFail(xrootd.CodeInvalidRequest, xrootd.ReqAuth, ar.Body(), xrootd.ZtnCredentials(ts.is.Token(t, "storage.modify:/", nil)))
		rc.mustFail(xrootd.CodeInvalidRequest, xrootd.ReqAuth, xrootd.AuthRequest{CredType: [4]byte{'u', 'n', 'i', 'x'}}.Body(), []byte("unix\x00root root\x00"))
	}
	// Nor through the main one once authenticated.
	main.mustFail(xrootd.CodeInvalidRequest, xrootd.ReqAuth, ar.Body(), xrootd.ZtnCredentials(ts.is.Token(t, "storage.modify:/", nil)))
	if msg := main.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqMkdir, xrootd.MkdirRequest{}.Body(), []byte("/store/d")); !strings.Contains(msg, "does not grant storage.create:/d") {
		t.Fatalf("mkdir after a refused second kXR_auth: %q", msg)
	}
	reqs := rec.take()
	// The refused stat before kXR_auth never reached the Authorizer.
	allBear(t, "session with ztn", reqs, tok)
	if len(reqs) != 4 { // open, two stats, mkdir
		t.Errorf("%d requests reached the Authorizer, want 4: %s", len(reqs), opsOf(reqs))
	}
}

// opsOf lists requests as "op path" (no credentials).
func opsOf(reqs []auth.Request) string {
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "[%s %s] ", r.Op, r.Path)
	}
	return b.String()
}

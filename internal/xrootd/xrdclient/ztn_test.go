package xrdclient

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// noDiscoveredToken empties the places the WLCG discovery looks at, so
// that a token of the machine running the tests is never found.
func noDiscoveredToken(t *testing.T) {
	t.Setenv("BEARER_TOKEN", "")
	t.Setenv("BEARER_TOKEN_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
}

// TestZtnWireBytes: the credentials are XrdSecProtocolztn's TokenResp:
// "ztn\0", version 0, 'T' (a token), two reserved bytes, the length of
// the token and its NUL (network order), the token, a NUL.
func TestZtnWireBytes(t *testing.T) {
	got := string(xrootd.ZtnCredentials("abc"))
	if want := "ztn\x00\x00T\x00\x00\x00\x04abc\x00"; got != want {
		t.Fatalf("credentials %q, want %q", got, want)
	}
	for params, want := range map[string]int{"0:4096:": 4096, "0:16384:": 16384, "256:512:": 512} {
		if n, ok := xrootd.ParseZtnParams(params); !ok || n != want {
			t.Errorf("params %q: %d %v", params, n, ok)
		}
	}
	for _, bad := range []string{"", "0", "0:", "0:0:", "x:4096:", "0:4096", "0:-1:"} {
		if _, ok := xrootd.ParseZtnParams(bad); ok {
			t.Errorf("params %q accepted", bad)
		}
	}
}

// TestZtnChoice: which protocol the client answers a login's security
// parameters with, and why it gives up.
func TestZtnChoice(t *testing.T) {
	cert := testcert.New(t)
	const tok = "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJl"
	unix := "unix:unix\x00alice atlas\x00"
	cases := []struct {
		name     string
		tls      bool   // the server switches the client to TLS
		security string // the login's security parameters
		refuse   map[string]string
		token    func() (string, error)
		auths    []string // kXR_auth requests, "type:credentials"
		err      string   // in the error, "" for success
	}{
		{name: "token over TLS", tls: true, security: "&P=ztn,0:4096:&P=unix", token: fixed(tok),
			auths: []string{"ztn:" + string(xrootd.ZtnCredentials(tok))}},
		{name: "no token: next protocol", tls: true, security: "&P=ztn,0:4096:&P=unix", token: fixed(""), auths: []string{unix}},
		{name: "never over plain TCP", security: "&P=ztn,0:4096:&P=unix", token: fixed(tok), auths: []string{unix}},
		{name: "ztn only, no token", tls: true, security: "&P=ztn,0:4096:", token: fixed(""),
			err: "asks for a token (ztn), but no token found (set BEARER_TOKEN or BEARER_TOKEN_FILE, or give --token)"},
		{name: "ztn only, plain TCP", security: "&P=ztn,0:4096:", token: fixed(tok), err: "tokens go over TLS only: use roots://"},
		{name: "token larger than the server takes", tls: true, security: "&P=ztn,0:40:&P=unix", token: fixed(tok),
			err: "the token (51 bytes) is larger than the server takes (40)"},
		{name: "token source fails", tls: true, security: "&P=ztn,0:4096:&P=unix",
			token: func() (string, error) { return "", errors.New("token file /x: permission denied") }, err: "token file /x: permission denied"},
		{name: "token refused: no anonymous fall back", tls: true, security: "&P=ztn,0:4096:&P=unix", token: fixed(tok),
			refuse: map[string]string{"ztn": "invalid token: token expired"},
			auths:  []string{"ztn:" + string(xrootd.ZtnCredentials(tok))}, err: "invalid token: token expired"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
				return fc.ok(h.StreamID, []byte(statLine+"\x00"))
			})
			s.security, s.refuseAuth = c.security, c.refuse
			if c.tls {
				s.tls = cert.ServerConfig()
			}
			tr := New(Options{User: "alice", Group: "atlas", TLS: &tls.Config{RootCAs: cert.Pool}, Token: c.token})
			defer tr.CloseIdle()
			_, err := tr.Stat(testCtx(t), mustURL(t, s.URL("/data/f")), nil, false)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("stat: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("stat: %v, want %q", err, c.err)
			case c.err != "" && !errors.Is(err, client.ErrUnauthorized):
				t.Errorf("%v does not match client.ErrUnauthorized", err)
			case err != nil && strings.Contains(err.Error(), tok[20:]):
				t.Errorf("the token is in the error: %v", err)
			}
			if a := s.authList(); strings.Join(a, "|") != strings.Join(c.auths, "|") {
				t.Errorf("kXR_auth requests %q, want %q", a, c.auths)
			}
		})
	}
}

func fixed(tok string) func() (string, error) { return func() (string, error) { return tok, nil } }

// TestZtnDiscovery: without Options.Token the client finds a token where
// XrdCl does, in its order: BEARER_TOKEN, BEARER_TOKEN_FILE,
// $XDG_RUNTIME_DIR/bt_u$UID, then bt_u$UID in the temporary directory.
func TestZtnDiscovery(t *testing.T) {
	cert := testcert.New(t)
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		return fc.ok(h.StreamID, []byte(statLine+"\x00"))
	})
	s.security, s.tls = "&P=ztn,0:4096:&P=unix", cert.ServerConfig()
	sent := func() string {
		t.Helper()
		tr := New(Options{User: "alice", Group: "atlas", TLS: &tls.Config{RootCAs: cert.Pool}})
		defer tr.CloseIdle()
		if _, err := tr.Stat(testCtx(t), mustURL(t, s.URL("/data/f")), nil, false); err != nil {
			t.Fatal(err)
		}
		a := s.authList()
		last := a[len(a)-1]
		if tok, ok := strings.CutPrefix(last, "ztn:"); ok {
			got, msg := xrootd.ParseZtn([]byte(tok))
			if msg != "" {
				t.Fatalf("credentials sent: %s", msg)
			}
			return got
		}
		return last
	}
	write := func(dir, tok string) string {
		p := filepath.Join(dir, "bt_u"+strconv.Itoa(os.Getuid()))
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noDiscoveredToken(t)
	if got := sent(); !strings.HasPrefix(got, "unix:") {
		t.Fatalf("no token anywhere: sent %q", got)
	}
	write(os.Getenv("TMPDIR"), "tok-tmp")
	if got := sent(); got != "tok-tmp" {
		t.Fatalf("bt_u$UID in TMPDIR: sent %q", got)
	}
	write(os.Getenv("XDG_RUNTIME_DIR"), "tok-xdg")
	if got := sent(); got != "tok-xdg" {
		t.Fatalf("XDG_RUNTIME_DIR: sent %q", got)
	}
	t.Setenv("BEARER_TOKEN_FILE", write(t.TempDir(), "tok-file"))
	if got := sent(); got != "tok-file" {
		t.Fatalf("BEARER_TOKEN_FILE: sent %q", got)
	}
	t.Setenv("BEARER_TOKEN", "  tok-env\n")
	if got := sent(); got != "tok-env" {
		t.Fatalf("BEARER_TOKEN: sent %q", got)
	}
}

package client_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://h/p", "https://h/p"},
		{"https://h/p?a=1&b=2", "https://h/p?a=1&b=2"},
		{"https://h/p?authz=Bearer%20SECRET", "https://h/p?authz=xxxxx"},
		{"https://h/p?x=1&authz=SECRET&y=2", "https://h/p?x=1&authz=xxxxx&y=2"},
		{"https://h/p?AUTHZ=SECRET", "https://h/p?AUTHZ=xxxxx"},
		{"https://h/p?auth%7A=SECRET", "https://h/p?auth%7A=xxxxx"},
		{"https://h/p?access_token=SECRET", "https://h/p?access_token=xxxxx"},
		{"https://b.s3/k?X-Amz-Credential=AKIA&X-Amz-Signature=SECRET&X-Amz-Expires=60", "https://b.s3/k?X-Amz-Credential=xxxxx&X-Amz-Signature=xxxxx&X-Amz-Expires=60"},
		{"root://h//store/f?authz=SECRET&xrd.wantprot=ztn", "root://h//store/f?authz=xxxxx&xrd.wantprot=ztn"},
		{"https://u:SECRET@h/p", "https://u:xxxxx@h/p"},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := client.Redact(u); got != tc.want {
			t.Errorf("Redact(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := client.Redact(nil); got != "" {
		t.Errorf("Redact(nil) = %q", got)
	}
}

// TestTokenInQueryNeverShown: a user's URL carrying its token as authz
// (what XrdHttp and Pelican accept) never shows the token in an error or
// a debug log: a refused connection, a 404, a redirect loop.
func TestTokenInQueryNeverShown(t *testing.T) {
	const secret = "eyJSECRETTOKENVALUE"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("authz") != "Bearer "+secret {
			t.Errorf("the server got query %q", r.URL.RawQuery)
		}
		switch r.URL.Path {
		case "/loop":
			http.Redirect(w, r, "/loop?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var logs bytes.Buffer
	c := client.New()
	c.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c.Policy.Attempts = 2
	c.Policy.Backoff, c.Policy.MaxBackoff = time.Millisecond, time.Millisecond
	q := "?authz=Bearer%20" + secret
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, u := range []string{"http://" + dead + "/f" + q, srv.URL + "/missing" + q, srv.URL + "/loop" + q} {
		_, err := c.Stat(ctx, u)
		if err == nil {
			t.Fatalf("stat of URL %d: no error", i)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the token: %v", err)
		}
		if !strings.Contains(err.Error(), "authz=xxxxx") {
			t.Errorf("error does not name the URL (redacted): %v", err)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("debug log shows the token:\n%s", logs.String())
	}
}

package transfer_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
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
	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// ftsEnv is `wanda transfer serve` as the app builds it (token issuer,
// administrators, loopback allowed), in front of three wanda storages
// over https that take tokens of the same issuer.
type ftsEnv struct {
	url   string // the service
	is    *authtest.Issuer
	sites [3]*testserver.Server
	dirs  [3]string
	robot string // the FTS access token of the submitter (a Rucio robot of VO atlas)
	other string // another identity's
	admin string
	log   *testserver.LogBuffer // the service's log
	pool  *http.Client
}

func startFTS(t *testing.T) *ftsEnv {
	t.Helper()
	e := &ftsEnv{is: authtest.NewIssuer(t), log: &testserver.LogBuffer{}}
	pair := testcert.New(t)
	certDir := t.TempDir()
	certFile, keyFile := filepath.Join(certDir, "cert.pem"), filepath.Join(certDir, "key.pem")
	if err := os.WriteFile(certFile, pair.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pair.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range e.sites {
		e.dirs[i] = t.TempDir()
		e.sites[i] = testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
			authtest.Protect(e.is, "/", false)(c)
			c.Server.TLS = config.TLS{Cert: certFile, Key: keyFile}
			c.Server.TPC.Allow = []string{"127.0.0.0/8"}
			c.Server.TPC.CA = certFile
		}}, config.Export{Prefix: "/store", Path: e.dirs[i]})
	}
	cl := client.New()
	cl.Policy = client.Policy{Attempts: 2, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Stall: 10 * time.Second}
	cl.HTTP.Client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pair.Pool}
	ac := config.DefaultAuth()
	ac.Tokens.Issuers = []config.TokenIssuer{{URL: e.is.URL}}
	ac.Tokens.Audiences = []string{authtest.Audience}
	e.robot = e.is.Token(t, "fts", map[string]any{"sub": "rucio-robot", "wlcg.groups": []string{"/atlas"}})
	e.other = e.is.Token(t, "fts", map[string]any{"sub": "mallory", "wlcg.groups": []string{"/atlas"}})
	e.admin = e.is.Token(t, "fts", map[string]any{"sub": "ops", "wlcg.groups": []string{"/atlas/ops"}})
	log := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := app.NewTransfer(context.Background(), app.TransferOptions{
		DB: "sqlite:" + filepath.Join(t.TempDir(), "t.db"), Client: cl, Auth: ac, Allow: []string{"127.0.0.0/8"},
		Admins: []string{"group:/atlas/ops"}, ShutdownTimeout: 5 * time.Second,
	}, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		svc.Close()
		if t.Failed() {
			t.Logf("service log:\n%s", e.log.String())
		}
	})
	e.pool = &http.Client{Timeout: 30 * time.Second}
	// The issuer's keys arrive in the background: wait for them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := e.do(t, "GET", "/whoami", e.robot, nil)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service does not take the robot's token: %d", code)
		}
		time.Sleep(20 * time.Millisecond) // polling the service
	}
	return e
}

// do sends a request to the service as tok (none when ""), with a JSON
// body (a string is sent as it is).
func (e *ftsEnv) do(t *testing.T, method, path, tok string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := e.pool.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{e.robot, e.other, e.admin} {
		if bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s %s answered a token: %s", method, path, b)
		}
	}
	return resp.StatusCode, b
}

// put writes a file at site i and returns its davs:// URL (as Rucio
// names WebDAV storages).
func (e *ftsEnv) put(t *testing.T, i int, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(e.dirs[i], name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return e.davs(i, name)
}

// davs is name's davs:// URL at site i.
func (e *ftsEnv) davs(i int, name string) string {
	return "davs://" + strings.TrimPrefix(e.sites[i].URL, "https://") + "/store/" + name
}

// read is name at site i ("" when absent).
func (e *ftsEnv) read(i int, name string) string {
	b, err := os.ReadFile(filepath.Join(e.dirs[i], name))
	if err != nil {
		return ""
	}
	return string(b)
}

// decode unmarshals b, failing the test.
func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/config"
)

// runAuthDemo shows a protected export: a token issuer (discovery
// document and keys on loopback), a server that trusts it, a write refused
// without a token and accepted with one, and a create-only token that
// cannot replace what it wrote.
func runAuthDemo(ctx context.Context, out, logw io.Writer, dir string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	keyFile, tokFile := filepath.Join(dir, "issuer.pem"), filepath.Join(dir, "alice.token")
	if err := runSteps(ctx, out, [][]string{{"token", "keygen", "--out", keyFile, "--jwks", filepath.Join(dir, "issuer.jwks")}}); err != nil {
		return err
	}
	k, err := token.LoadKey(keyFile, "key-1")
	if err != nil {
		return err
	}
	jwks, err := token.JWKS(k)
	if err != nil {
		return err
	}
	iln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	issuer := "http://" + iln.Addr().String()
	ihs := &http.Server{Handler: token.IssuerHandler(issuer, func() []byte { return jwks }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = ihs.Serve(iln) }()
	defer ihs.Close()

	protected := filepath.Join(dir, "protected")
	if err := os.MkdirAll(protected, 0o755); err != nil {
		return err
	}
	const aud = "https://wanda.demo"
	cfg := config.Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.Exports = []config.Export{{Prefix: "/protected", Path: protected}}
	cfg.Server.ShutdownTimeout = 2 * time.Second
	cfg.Auth.Tokens.Issuers = []config.TokenIssuer{{URL: issuer, BasePath: "/protected"}}
	cfg.Auth.Tokens.Audiences = []string{aud}
	srv, err := app.NewServer(cfg, app.NewLogger(cfg.Log, logw).With("node", "protected"), prometheus.NewRegistry())
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-done
	}()
	base := "http://" + ln.Addr().String() + "/protected"
	fmt.Fprintf(out, "== a protected export: %s trusts tokens of the issuer %s (keys found through %s/.well-known/openid-configuration);\n   reads are open, writes need a token with storage.create or storage.modify (docs/security.md)\n\n", base, issuer, issuer)
	src := filepath.Join(dir, "run1.txt")
	if err := os.WriteFile(src, []byte("histograms of run 1\n"), 0o644); err != nil {
		return err
	}
	dst := base + "/alice/run1.txt"
	if err := runStepFails(ctx, out, []string{"put", src, dst}); err != nil {
		return err
	}
	if err := runSteps(ctx, out, [][]string{
		{"token", "create", "--key", keyFile, "--issuer", issuer, "--aud", aud, "--sub", "alice",
			"--scope", "storage.read:/ storage.create:/alice", "--lifetime", "10m", "--out", tokFile},
	}); err != nil {
		return err
	}
	// inspect explains what the token may do: create, not delete.
	if err := runStepFails(ctx, out, []string{"token", "inspect", "--token-issuer", issuer + "=/protected", "--token-audience", aud,
		"--path", "/protected/alice/run1.txt", "--op", "delete", tokFile}); err != nil {
		return err
	}
	if err := runSteps(ctx, out, [][]string{
		{"put", "--token", tokFile, src, dst},
		{"ls", "-l", base + "/alice/"},
	}); err != nil {
		return err
	}
	// storage.create made the file; replacing it needs storage.modify.
	return runStepFails(ctx, out, []string{"put", "--token", tokFile, src, dst})
}

// runStepFails runs one step that must fail (a refusal the demo shows).
func runStepFails(ctx context.Context, out io.Writer, s []string) error {
	fmt.Fprintf(out, "$ wanda %s   # refused, as it should be\n", join(s))
	if code := Run(ctx, s, out, out); code == 0 {
		return fmt.Errorf("demo step %q succeeded but should have been refused", join(s))
	}
	fmt.Fprintln(out)
	return nil
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/config"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make, inspect and issue bearer tokens (WLCG profile, SciTokens)",
		Long: `Bearer tokens for sites and tests (docs/security.md).

  wanda token keygen --out issuer.pem --jwks issuer.jwks
  wanda token create --key issuer.pem --issuer https://iss.example --aud https://site.example \
      --scope "storage.read:/ storage.create:/user/alice" --sub alice > tok
  wanda token inspect --token-issuer https://iss.example --token-keys https://iss.example=issuer.jwks \
      --path /store/user/alice/f --op write < tok
  wanda token issuer --key issuer.pem --listen 127.0.0.1:8443 --tls-cert c.pem --tls-key k.pem`,
	}
	cmd.AddCommand(newTokenKeygenCmd(), newTokenCreateCmd(), newTokenInspectCmd(), newTokenIssuerCmd())
	return cmd
}

func newTokenKeygenCmd() *cobra.Command {
	var alg, kid, out, jwks string
	cmd := &cobra.Command{
		Use:   "keygen --out KEY.pem [--jwks KEYS.jwks]",
		Short: "Make a signing key (ES256 or RS256) and its public JWKS",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("keygen needs --out KEY.pem")
			}
			k, err := token.GenerateKey(alg, kid)
			if err != nil {
				return usagef("keygen: %v", err)
			}
			pem, err := k.MarshalPEM()
			if err != nil {
				return err
			}
			if err := writeFileExcl(out, pem, 0o600); err != nil {
				return err
			}
			if jwks != "" {
				b, err := token.JWKS(k)
				if err != nil {
					return err
				}
				if err := os.WriteFile(jwks, b, 0o644); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %s (%s, kid %s)\n", out, k.Alg(), k.KID())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&alg, "alg", "ES256", "ES256 or RS256")
	f.StringVar(&kid, "kid", "key-1", "key id")
	f.StringVar(&out, "out", "", "private key file to write (PEM, mode 0600; never overwritten)")
	f.StringVar(&jwks, "jwks", "", "also write the public JWKS here")
	return cmd
}

// writeFileExcl writes a new file; an existing one is an error.
func writeFileExcl(name string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(name)
		return err
	}
	return f.Close()
}

func newTokenCreateCmd() *cobra.Command {
	var (
		keyFile, kid, issuer, sub, scope, profile, out string
		aud, groups                                    []string
		lifetime, notBefore                            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --key KEY.pem --issuer URL --scope SCOPES [--aud AUD]...",
		Short: "Sign a token (WLCG profile by default) and print it",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || issuer == "" {
				return usagef("create needs --key and --issuer")
			}
			if profile != "wlcg" && profile != "scitokens" {
				return usagef("--profile %q: wlcg or scitokens", profile)
			}
			k, err := token.LoadKey(keyFile, kid)
			if err != nil {
				return err
			}
			now := time.Now()
			claims := map[string]any{
				"iss": issuer, "sub": sub, "iat": now.Unix(), "nbf": now.Add(notBefore).Unix(),
				"exp": now.Add(lifetime).Unix(), "jti": fmt.Sprintf("%x", now.UnixNano()),
			}
			if scope != "" {
				claims["scope"] = scope
			}
			switch len(aud) {
			case 0:
			case 1:
				claims["aud"] = aud[0]
			default:
				claims["aud"] = aud
			}
			switch profile {
			case "wlcg":
				claims["wlcg.ver"] = "1.0"
				if len(groups) > 0 {
					claims["wlcg.groups"] = groups
				}
			case "scitokens":
				claims["ver"] = "scitoken:2.0"
			default:
				return usagef("--profile %q: wlcg or scitokens", profile)
			}
			tok, err := k.Sign(claims)
			if err != nil {
				return err
			}
			if out != "" {
				return writeFileExcl(out, []byte(tok+"\n"), 0o600)
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyFile, "key", "", "signing key (PEM, from keygen)")
	f.StringVar(&kid, "kid", "key-1", "key id put in the token's header")
	f.StringVar(&issuer, "issuer", "", "the iss claim")
	f.StringVar(&sub, "sub", "wanda-user", "the sub claim")
	f.StringArrayVar(&aud, "aud", nil, "audience (repeatable)")
	f.StringVar(&scope, "scope", "", `space-separated scopes, e.g. "storage.read:/ storage.create:/user/alice"`)
	f.StringArrayVar(&groups, "group", nil, "wlcg.groups entry (repeatable)")
	f.StringVar(&profile, "profile", "wlcg", "wlcg or scitokens")
	f.DurationVar(&lifetime, "lifetime", time.Hour, "time to expiry")
	f.DurationVar(&notBefore, "not-before", 0, "nbf relative to now")
	f.StringVar(&out, "out", "", "write the token to this new file (mode 0600) instead of stdout")
	return cmd
}

func newTokenInspectCmd() *cobra.Command {
	var (
		af       authFlags
		path, op string
		cfgFile  string
	)
	cmd := &cobra.Command{
		Use:   "inspect [TOKEN-FILE]",
		Short: "Decode a token, verify it against the configured issuers, and say whether a path and operation would be allowed",
		Long: `Decode a token (from the file, or standard input, or the WLCG discovery
order: BEARER_TOKEN, BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u$UID,
/tmp/bt_u$UID), print its header and claims, then verify it as a
wanda site configured by --config or the --token-* flags would, and with
--path (and --op read|list|write|delete|mkdir|move) say whether the site's
policy allows that operation and why not.`,
		Args: nArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := tokenOps[op]; !ok {
				return usagef("--op %q: read, list, write, delete, mkdir or move", op)
			}
			raw, err := readTokenArg(cmd, args)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			hdr, payload, err := token.Decode(raw)
			if err != nil {
				return fmt.Errorf("inspect: %w", err)
			}
			printClaims(w, "header", hdr)
			printClaims(w, "claims", payload)
			explainTimes(w, payload)
			cfg := config.Default()
			if cfgFile != "" {
				if cfg, err = config.Load(cfgFile); err != nil {
					return err
				}
			}
			var tls config.TLS
			if err := af.apply(cmd, &cfg.Auth, &tls); err != nil {
				return err
			}
			if len(cfg.Auth.Tokens.Issuers) == 0 {
				fmt.Fprintln(w, "verify: no issuer configured (give --token-issuer/--token-keys or --config): signature not checked")
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			verdict, err := app.InspectToken(ctx, cfg.Auth, raw, path, op)
			fmt.Fprintln(w, verdict)
			return err
		},
	}
	af.add(cmd)
	f := cmd.Flags()
	f.StringVar(&cfgFile, "config", "", "a site's YAML configuration: its auth section is used")
	f.StringVar(&path, "path", "", "logical path to check, e.g. /store/user/alice/f.root")
	f.StringVar(&op, "op", "read", "operation to check: read, list, write, delete, mkdir, move")
	return cmd
}

var tokenOps = map[string]bool{"read": true, "list": true, "write": true, "delete": true, "mkdir": true, "move": true}

func readTokenArg(cmd *cobra.Command, args []string) (string, error) {
	var b []byte
	var err error
	switch {
	case len(args) == 1 && args[0] != "-":
		b, err = os.ReadFile(args[0])
	case len(args) == 1 || os.Getenv("BEARER_TOKEN") == "" && os.Getenv("BEARER_TOKEN_FILE") == "":
		b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
	case os.Getenv("BEARER_TOKEN") != "":
		b = []byte(os.Getenv("BEARER_TOKEN"))
	default:
		b, err = os.ReadFile(os.Getenv("BEARER_TOKEN_FILE"))
	}
	if err != nil {
		return "", err
	}
	raw := strings.TrimSpace(string(b))
	if raw == "" {
		return "", errors.New("inspect: no token given")
	}
	return raw, nil
}

func printClaims(w io.Writer, what string, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(w, "%s: %s\n", what, b)
}

// explainTimes prints exp/nbf/iat as times with their distance from now.
func explainTimes(w io.Writer, payload map[string]any) {
	for _, k := range []string{"iat", "nbf", "exp"} {
		if f, ok := payload[k].(float64); ok {
			t := time.Unix(int64(f), 0)
			fmt.Fprintf(w, "%s: %s (%s)\n", k, t.UTC().Format(time.RFC3339), relTime(t))
		}
	}
}

func relTime(t time.Time) string {
	d := time.Until(t).Round(time.Second)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

func newTokenIssuerCmd() *cobra.Command {
	var keyFile, kid, listen, issuerURL, cert, key string
	cmd := &cobra.Command{
		Use:   "issuer --key KEY.pem --listen HOST:PORT",
		Short: "Serve an issuer's discovery document and public keys (for demos and tests)",
		Long: `Serve /.well-known/openid-configuration and /jwks for a signing key, so
that sites (wanda, XRootD's SciTokens plugin) can find its public key. It
issues no tokens over the network: sign them with 'wanda token create'.
Sites fetch keys over HTTPS only, except from loopback addresses.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" {
				return usagef("issuer needs --key")
			}
			k, err := token.LoadKey(keyFile, kid)
			if err != nil {
				return err
			}
			jwks, err := token.JWKS(k)
			if err != nil {
				return err
			}
			ln, err := app.Listen(listen)
			if err != nil {
				return err
			}
			scheme := "http"
			if cert != "" {
				scheme = "https"
			}
			if issuerURL == "" {
				issuerURL = scheme + "://" + ln.Addr().String()
			}
			hs := &http.Server{Handler: token.IssuerHandler(issuerURL, func() []byte { return jwks }), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(cmd.OutOrStdout(), "issuer %s (kid %s)\n", issuerURL, k.KID())
			go func() {
				<-cmd.Context().Done()
				_ = hs.Close()
			}()
			if cert != "" {
				err = hs.ServeTLS(ln, cert, key)
			} else {
				err = hs.Serve(ln)
			}
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyFile, "key", "", "signing key (PEM, from keygen)")
	f.StringVar(&kid, "kid", "key-1", "key id")
	f.StringVar(&listen, "listen", "127.0.0.1:8443", "address to serve on")
	f.StringVar(&issuerURL, "url", "", "the issuer URL (default: from the listen address)")
	f.StringVar(&cert, "tls-cert", "", "TLS certificate (PEM)")
	f.StringVar(&key, "tls-key", "", "TLS key (PEM)")
	return cmd
}

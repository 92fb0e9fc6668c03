package token

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// IssuerHandler serves the two documents a verifier needs from an issuer:
// GET /.well-known/openid-configuration ({"issuer": issuerURL,
// "jwks_uri": issuerURL+"/jwks"}) and GET /jwks (the JWKS jwks returns,
// asked on every request so that keys can rotate). When issuerURL has a
// path, the handler also answers under it, so that it can be mounted at
// the root of the issuer's host or below the path.
func IssuerHandler(issuerURL string, jwks func() []byte) http.Handler {
	base := strings.TrimSuffix(issuerURL, "/")
	prefix := ""
	if u, err := url.Parse(base); err == nil {
		prefix = u.Path
	}
	discovery, _ := json.Marshal(map[string]any{
		"issuer":                                issuerURL,
		"jwks_uri":                              base + "/jwks",
		"id_token_signing_alg_values_supported": []string{algRS256, algES256},
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		switch strings.TrimPrefix(r.URL.Path, prefix) {
		case "/.well-known/openid-configuration":
			body = discovery
		case "/jwks":
			body = jwks()
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=60")
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
	})
}

package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/config"
)

// authFlags are the quick-start flags of the site policy and TLS, shared
// by server, cache and redirector (a contract: tests rely on them).
type authFlags struct {
	issuers, keys, audiences []string
	anonRead                 bool
	tlsCert, tlsKey          string
	caDir, gridMap, vomsDir  string
}

func (a *authFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&a.issuers, "token-issuer", nil, "trust bearer tokens of this issuer: URL[=BASEPATH] (repeatable); then writes need a token")
	f.StringArrayVar(&a.keys, "token-keys", nil, "offline keys of an issuer: URL=JWKSFILE (repeatable; no discovery for it)")
	f.StringArrayVar(&a.audiences, "token-audience", nil, "accepted token audience (repeatable)")
	f.BoolVar(&a.anonRead, "anonymous-read", true, "let requests without a credential read and list (--anonymous-read=false to refuse)")
	f.StringVar(&a.tlsCert, "tls-cert", "", "TLS certificate (PEM): serve HTTPS and roots://")
	f.StringVar(&a.tlsKey, "tls-key", "", "TLS private key (PEM)")
	f.StringVar(&a.caDir, "x509-ca-dir", "", "accept X.509 client certificates (and grid proxies) issued by the CAs in this directory")
	f.StringVar(&a.gridMap, "grid-mapfile", "", "map certificate DNs to user names (grid-mapfile)")
	f.StringVar(&a.vomsDir, "x509-voms-dir", "", "verify the VOMS attributes of proxies with this vomsdir (VO/HOST.lsc files)")
}

// apply merges the flags given into the config's auth section and TLS.
func (a *authFlags) apply(cmd *cobra.Command, c *config.Auth, tls *config.TLS) error {
	fl := cmd.Flags()
	for _, spec := range a.issuers {
		u, base, _ := strings.Cut(spec, "=")
		if u == "" {
			return usagef("--token-issuer %q: want URL[=BASEPATH]", spec)
		}
		if i := issuerIndex(c, u); i >= 0 {
			c.Tokens.Issuers[i].BasePath = base
			continue
		}
		c.Tokens.Issuers = append(c.Tokens.Issuers, config.TokenIssuer{URL: u, BasePath: base})
	}
	for _, spec := range a.keys {
		u, file, ok := strings.Cut(spec, "=")
		if !ok || u == "" || file == "" {
			return usagef("--token-keys %q: want URL=JWKSFILE", spec)
		}
		i := issuerIndex(c, u)
		if i < 0 {
			c.Tokens.Issuers = append(c.Tokens.Issuers, config.TokenIssuer{URL: u})
			i = len(c.Tokens.Issuers) - 1
		}
		c.Tokens.Issuers[i].JWKSFile = file
	}
	c.Tokens.Audiences = append(c.Tokens.Audiences, a.audiences...)
	if fl.Changed("anonymous-read") {
		c.AnonymousRead = a.anonRead
	}
	if a.tlsCert != "" || a.tlsKey != "" {
		tls.Cert, tls.Key = a.tlsCert, a.tlsKey
	}
	if a.caDir != "" {
		c.X509.CADir = a.caDir
	}
	if a.gridMap != "" {
		c.X509.GridMap = a.gridMap
	}
	if a.vomsDir != "" {
		c.X509.VOMSDir = a.vomsDir
	}
	return nil
}

func issuerIndex(c *config.Auth, u string) int {
	for i, is := range c.Tokens.Issuers {
		if strings.TrimSuffix(is.URL, "/") == strings.TrimSuffix(u, "/") {
			return i
		}
	}
	return -1
}

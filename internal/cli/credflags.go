package cli

import (
	"crypto/tls"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// credFlags are the client verbs' credentials (docs/security.md).
type credFlags struct {
	token, cert, key, ca string
}

func (f *credFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.token, "token", "", "bearer token file, re-read when it changes (default: BEARER_TOKEN, BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u$UID, /tmp/bt_u$UID)")
	fl.StringVar(&f.cert, "cert", "", "HTTPS client certificate or grid proxy (default: X509_USER_PROXY, /tmp/x509up_u$UID)")
	fl.StringVar(&f.key, "key", "", "its private key (default: in the certificate file, as in a proxy)")
	fl.StringVar(&f.ca, "ca", "", "CA certificates to trust besides the system's: a PEM file or directory (default: X509_CERT_DIR)")
}

// apply gives c the credentials found; the token may go to the hosts of
// urls over plain http (the hosts the user named), elsewhere over https
// only.
func (f *credFlags) apply(c *client.Client, urls ...string) error {
	src, err := cred.DiscoverToken(f.token)
	if err != nil {
		return err
	}
	var tokenFn func() (string, error)
	if src != nil {
		tokenFn = src.Token
		c.HTTP.Token = tokenFn
		for _, u := range urls {
			c.HTTP.TrustURL(u)
		}
		c.Log.Debug("bearer token", "from", src.Where())
	}
	roots, err := cred.RootCAs(f.ca)
	if err != nil {
		return err
	}
	cert, where, err := cred.DiscoverCert(f.cert, f.key)
	if err != nil {
		return err
	}
	var tc *tls.Config
	if roots != nil || cert != nil {
		tc = &tls.Config{RootCAs: roots}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
			c.Log.Debug("client certificate", "from", where)
		}
		tr, ok := c.HTTP.Client.Transport.(*http.Transport)
		if !ok {
			return fmt.Errorf("client: unexpected HTTP transport %T", c.HTTP.Client.Transport)
		}
		tr.TLSClientConfig = tc
	}
	// root:// and roots:// with the same token (ztn) and TLS settings.
	xt := xrdclient.New(xrdclient.Options{Log: c.Log, Token: tokenFn, TLS: tc})
	c.Register("root", xt)
	c.Register("roots", xt)
	return nil
}

package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/client/s3client"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/s3conn"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// credFlags are the client verbs' credentials (docs/security.md).
type credFlags struct {
	token, cert, key, ca string
	// s3:// endpoint, region and addressing (credentials only from the
	// AWS environment and files, never the command line)
	s3Endpoint, s3Region, s3Addressing string

	src *cred.TokenSource // set by apply: nil when no token was found
}

func (f *credFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.token, "token", "", "bearer token file, re-read when it changes; sent to the hosts named, and to others over https only (default: BEARER_TOKEN, BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u$UID, /tmp/bt_u$UID)")
	fl.StringVar(&f.cert, "cert", "", "HTTPS client certificate or grid proxy, PEM with its chain (default: X509_USER_PROXY, /tmp/x509up_u$UID)")
	fl.StringVar(&f.key, "key", "", "the private key of --cert (default: in the certificate file, as in a proxy)")
	fl.StringVar(&f.s3Endpoint, "s3-endpoint", "", "the S3 server of s3://BUCKET/KEY URLs (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS); credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or ~/.aws/credentials")
	fl.StringVar(&f.s3Region, "s3-region", "", "the region of s3:// URLs (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1)")
	fl.StringVar(&f.s3Addressing, "s3-addressing", "", "bucket in the path or the host name of s3:// requests: auto (path style for IP addresses, localhost and non-AWS hosts), path or virtual")
	fl.StringVar(&f.ca, "ca", "", "CA certificates to trust besides the system's: a PEM file or directory (default: X509_CERT_DIR, /etc/grid-security/certificates)")
}

// apply gives c the credentials found; the token may go to the hosts of
// urls over plain http (the hosts the user named), elsewhere over https
// only.
func (f *credFlags) apply(c *client.Client, urls ...string) error {
	src, err := cred.DiscoverToken(f.token)
	if err != nil {
		return err
	}
	f.src = src
	var tokenFn func() (string, error)
	if src != nil {
		tokenFn = src.Token
		c.HTTP.Token, c.HTTP.RenewToken = src.Token, src.Renew
		for _, u := range urls {
			c.HTTP.TrustURL(u)
		}
		c.Log.Debug("bearer token", "from", src.Where())
	}
	tc, err := f.tlsConfig(c.Log)
	if err != nil {
		return err
	}
	if tc != nil {
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
	s3client.Register(c, s3client.Options{Conn: s3conn.Conn{
		Endpoint: f.s3Endpoint, Region: f.s3Region, Addressing: s3conn.Addressing(f.s3Addressing),
	}})
	return nil
}

// tlsConfig is the CAs and the client certificate found; nil when there
// is neither (Go's defaults).
func (f *credFlags) tlsConfig(log *slog.Logger) (*tls.Config, error) {
	roots, err := cred.RootCAs(f.ca)
	if err != nil {
		return nil, err
	}
	cc, err := cred.DiscoverCert(f.cert, f.key)
	if err != nil {
		return nil, err
	}
	if cc != nil && cc.Expired() {
		leaf := cc.Certificate().Leaf
		if f.cert != "" {
			return nil, fmt.Errorf("--cert %s expired at %s", cc.Where(), leaf.NotAfter.UTC().Format("2006-01-02 15:04:05 MST"))
		}
		log.Warn("not presenting an expired proxy", "file", cc.Where(), "expired", leaf.NotAfter.UTC())
		cc = nil
	}
	if roots == nil && cc == nil {
		return nil, nil
	}
	tc := &tls.Config{RootCAs: roots}
	if cc != nil {
		// Always presented when a server asks (as grid tools do), not only
		// when its CA is in the server's list, and read again when the
		// proxy is renewed.
		tc.GetClientCertificate = cc.GetClientCertificate
		log.Debug("client certificate", "from", cc.Where())
	}
	return tc, nil
}

// explain adds to a refusal what the user can do about it: a 401 with no
// token found names the places looked at.
func (f *credFlags) explain(err error) error {
	if err == nil || f.src != nil || !errors.Is(err, client.ErrUnauthorized) {
		return err
	}
	return fmt.Errorf("%w (no bearer token found: give --token FILE, or set BEARER_TOKEN or BEARER_TOKEN_FILE)", err)
}

// httpClient is a plain HTTP client with the TLS settings of the flags
// (for the federation API).
func (f *credFlags) httpClient(log *slog.Logger) (*http.Client, error) {
	tc, err := f.tlsConfig(log)
	if err != nil || tc == nil {
		return http.DefaultClient, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Transport: tr}, nil
}

package client_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/cred"
)

// userChain makes a CA, an intermediate and a user certificate signed by
// it; it returns the user's certificate and the intermediate (PEM), and
// the user's key (PEM).
func userChain(t *testing.T, cn string) (leaf, inter, key []byte) {
	t.Helper()
	gen := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	sign := func(tmpl, parent *x509.Certificate, pub, signer any) (*x509.Certificate, []byte) {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	now := time.Now()
	ca := func(serial int64, name string) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign}
	}
	caKey, interKey, userKey := gen(), gen(), gen()
	caCert, _ := sign(ca(1, "Grid CA"), ca(1, "Grid CA"), &caKey.PublicKey, caKey)
	interCert, interPEM := sign(ca(2, "Grid Intermediate"), caCert, &interKey.PublicKey, caKey)
	_, leafPEM := sign(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, interCert, &userKey.PublicKey, interKey)
	kder, err := x509.MarshalPKCS8PrivateKey(userKey)
	if err != nil {
		t.Fatal(err)
	}
	return leafPEM, interPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func TestClientCertificate(t *testing.T) {
	for _, v := range []string{"X509_USER_PROXY", "X509_CERT_DIR"} {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	leaf, inter, key := userChain(t, "alice")
	certFile := filepath.Join(dir, "usercert.pem")
	keyFile := filepath.Join(dir, "userkey.pem")
	proxyFile := filepath.Join(dir, "x509up_u1000")
	for p, b := range map[string][]byte{
		certFile:  append(append([]byte(nil), leaf...), inter...),
		keyFile:   key,
		proxyFile: bytes.Join([][]byte{leaf, key, inter}, nil), // voms-proxy-init's layout
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The server asks for a certificate and says which CAs it takes:
	// none of ours (grid servers list their IGTF CAs). The client
	// presents its credential anyway, as grid tools do.
	otherCA := httptest.NewUnstartedServer(nil)
	otherCA.StartTLS()
	otherPool := otherCA.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	otherCA.Close()
	var mu sync.Mutex
	var seen []string
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var names []string
		for _, c := range r.TLS.PeerCertificates {
			names = append(names, c.Subject.CommonName)
		}
		mu.Lock()
		seen = append(seen, strings.Join(names, ","))
		mu.Unlock()
		if len(names) == 0 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	hs.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, ClientCAs: otherPool}
	hs.StartTLS()
	defer hs.Close()
	roots := hs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	for _, c := range []struct {
		name      string
		cert, key string
		env       string
	}{
		{"--cert and --key", certFile, keyFile, ""},
		{"--cert of a proxy", proxyFile, "", ""},
		{"X509_USER_PROXY", "", "", proxyFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("X509_USER_PROXY", c.env)
			cc, err := cred.DiscoverCert(c.cert, c.key)
			if err != nil || cc == nil {
				t.Fatalf("DiscoverCert: %v %v", cc, err)
			}
			cl := client.New()
			cl.HTTP = client.NewHTTPTransport(&tls.Config{RootCAs: roots, GetClientCertificate: cc.GetClientCertificate})
			cl.Register("https", cl.HTTP)
			mu.Lock()
			seen = nil
			mu.Unlock()
			var buf bytes.Buffer
			if _, err := cl.Get(context.Background(), hs.URL+"/f", &buf, ""); err != nil || buf.String() != "ok" {
				t.Fatalf("%v %q", err, buf.String())
			}
			mu.Lock()
			defer mu.Unlock()
			// The whole chain arrives: the user certificate and the
			// intermediate behind it.
			if len(seen) == 0 || seen[0] != "alice,Grid Intermediate" {
				t.Fatalf("the server saw %q", seen)
			}
		})
	}
}

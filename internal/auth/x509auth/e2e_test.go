package x509auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// whoami answers the verified identity: "DN|name|proxy|FQANs", or 401
// with the reason.
func whoami(v *Verifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := v.Verify(r.TLS.PeerCertificates)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "%s|%s|%v|%s", id.DN, id.Name, id.Proxy, strings.Join(id.FQANs, ","))
	})
}

// startServer serves whoami over TLS on loopback with a host certificate
// of the test CA and ServerTLS's client certificate request.
func startServer(t *testing.T, p *pki, v *Verifier) *httptest.Server {
	t.Helper()
	host := p.issue(&p.ca, x509.Certificate{
		RawSubject: rawName(t, "DC=org", "DC=test", "CN=localhost"), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, newKey(t))
	s := httptest.NewUnstartedServer(whoami(v))
	s.TLS = v.ServerTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{host.cert.Raw}, PrivateKey: host.key, Leaf: host.cert}},
	})
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// get fetches url presenting the credential in certFile (a proxy file,
// or a certificate with keyFile); "" presents none.
func get(t *testing.T, p *pki, url, certFile, keyFile string) (int, string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.cert)
	cfg := &tls.Config{RootCAs: roots}
	if certFile != "" {
		c, err := loadCert(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestEndToEnd(t *testing.T) {
	p := newPKI(t, "Test CA")
	alice := p.writeCred("alice", p.user("Alice"))
	v := p.verifier(Config{GridMap: writeFile(t, "grid-mapfile", []byte(`"/DC=org/DC=test/CN=Alice" alice`+"\n"))})
	s := startServer(t, p, v)

	if code, body := get(t, p, s.URL, alice.cert, alice.key); code != 200 || body != aliceDN+"|alice|false|" {
		t.Errorf("end-entity: %d %q", code, body)
	}
	px, _ := opensslProxy(t, alice, []*x509.Certificate{alice.c.cert}, "critical,language:id-ppl-inheritAll")
	if code, body := get(t, p, s.URL, px, ""); code != 200 || body != aliceDN+"|alice|true|" {
		t.Errorf("openssl proxy: %d %q", code, body)
	}
	if code, body := get(t, p, s.URL, "", ""); code != 401 || !strings.Contains(body, "no certificate") {
		t.Errorf("no certificate: %d %q", code, body)
	}
	// A proxy without the end-entity behind it: its issuer is none of
	// the CAs the server names, so Go's client does not even offer it.
	lone := writeFile(t, "lone.pem", []byte(strings.SplitAfter(readString(t, px), "-----END CERTIFICATE-----\n")[0]+keyBlock(t, px)))
	if code, body := get(t, p, s.URL, lone, ""); code != 401 || !strings.Contains(body, "no certificate") {
		t.Errorf("proxy alone: %d %q", code, body)
	}

	// curl (OpenSSL) with the proxy file as certificate and key.
	t.Run("curl", func(t *testing.T) {
		curl := needTool(t, "curl")
		ca := writeFile(t, "ca.pem", certPEM(p.ca.cert))
		for _, c := range []struct{ name, cert, key, want string }{
			{"proxy", px, px, aliceDN + "|alice|true|"},
			{"end-entity", alice.cert, alice.key, aliceDN + "|alice|false|"},
			{"proxy alone", lone, lone, "issuer was not sent"},
		} {
			out, _ := exec.Command(curl, "-sS", "--cert", c.cert, "--key", c.key, "--cacert", ca, s.URL+"/").CombinedOutput()
			if !strings.Contains(string(out), c.want) {
				t.Errorf("curl %s: %q, want %q", c.name, out, c.want)
			}
		}
	})
}

// A VOMS proxy over HTTPS: the FQANs reach the handler.
func TestEndToEndVOMS(t *testing.T) {
	needTool(t, "voms-proxy-fake")
	p := newPKI(t, "Test CA")
	user := p.writeCred("alice", p.issue(&p.ca, x509.Certificate{
		RawSubject: rawName(t, "DC=org", "DC=test", "CN=Alice"), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, newRSAKey(t)))
	host := p.writeCred("hostcert", p.issue(&p.ca, x509.Certificate{
		RawSubject: rawName(t, "DC=org", "DC=test", "CN=voms.test.org"), NotAfter: time.Now().Add(24 * time.Hour),
	}, newRSAKey(t)))
	v := p.verifier(Config{VOMSDir: vomsDir(t, map[string]string{"cms/voms.test.org.lsc": "/DC=org/DC=test/CN=voms.test.org\n/DC=org/DC=test/CN=Test CA\n"})})
	s := startServer(t, p, v)
	px := vomsFake(t, user, host, p.dir, "-rfc")
	want := aliceDN + "||true|/cms/Role=NULL/Capability=NULL,/cms/higgs/Role=production/Capability=NULL"
	if code, body := get(t, p, s.URL, px, ""); code != 200 || body != want {
		t.Errorf("VOMS proxy: %d %q, want %q", code, body, want)
	}
}

func readString(t *testing.T, f string) string {
	t.Helper()
	b, err := readRegular(f)
	if err != nil || b == nil {
		t.Fatalf("read %s: %v", f, err)
	}
	return string(b)
}

// keyBlock is the private key block of a proxy file.
func keyBlock(t *testing.T, f string) string {
	t.Helper()
	s := readString(t, f)
	i, j := strings.Index(s, "-----BEGIN PRIVATE KEY-----"), strings.Index(s, "-----END PRIVATE KEY-----")
	if i < 0 || j < 0 {
		t.Fatalf("%s: no key", f)
	}
	return s[i:j+len("-----END PRIVATE KEY-----")] + "\n"
}

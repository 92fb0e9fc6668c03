package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerateKey(t *testing.T) {
	testKeys(t)
	if rsaKey.Alg() != "RS256" || rsaKey.KID() != "rsa1" || rsaKey.priv.(*rsa.PrivateKey).N.BitLen() != 2048 {
		t.Errorf("RSA key %s %s", rsaKey.Alg(), rsaKey.KID())
	}
	if ecKey.Alg() != "ES256" || ecKey.KID() != "ec1" {
		t.Errorf("EC key %s %s", ecKey.Alg(), ecKey.KID())
	}
	k, err := GenerateKey("ES256", "")
	if err != nil || len(k.KID()) != 43 { // base64url of a SHA-256 thumbprint
		t.Errorf("derived kid %q, %v", k.KID(), err)
	}
	for _, alg := range []string{"HS256", "PS256", "none", ""} {
		if _, err := GenerateKey(alg, "x"); err == nil {
			t.Errorf("GenerateKey(%q) made a key", alg)
		}
	}
}

func writePEM(t *testing.T, typ string, der []byte, extra ...*pem.Block) string {
	t.Helper()
	var b []byte
	for _, e := range extra {
		b = append(b, pem.EncodeToMemory(e)...)
	}
	b = append(b, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})...)
	p := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadKey(t *testing.T) {
	testKeys(t)
	rsaPriv := rsaKey.priv.(*rsa.PrivateKey)
	ecPriv := ecKey.priv.(*ecdsa.PrivateKey)
	pkcs8, err := rsaKey.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	p8 := filepath.Join(t.TempDir(), "pkcs8.pem")
	os.WriteFile(p8, pkcs8, 0o600)
	sec1, _ := x509.MarshalECPrivateKey(ecPriv)
	for _, tc := range []struct {
		name, file, alg string
		pub             any
	}{
		{"PKCS#8 RSA (MarshalPEM)", p8, "RS256", &rsaPriv.PublicKey},
		{"PKCS#1 RSA", writePEM(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaPriv)), "RS256", &rsaPriv.PublicKey},
		{"SEC 1 EC after EC PARAMETERS", writePEM(t, "EC PRIVATE KEY", sec1, &pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}}), "ES256", &ecPriv.PublicKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := LoadKey(tc.file, "")
			if err != nil {
				t.Fatal(err)
			}
			if k.Alg() != tc.alg || k.KID() == "" {
				t.Errorf("alg %s kid %q", k.Alg(), k.KID())
			}
			if !k.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(tc.pub) {
				t.Error("not the key written")
			}
			k2, _ := LoadKey(tc.file, "")
			if k2.KID() != k.KID() {
				t.Error("derived kid not stable")
			}
			if k3, _ := LoadKey(tc.file, "mine"); k3.KID() != "mine" {
				t.Error("kid not taken")
			}
		})
	}

	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	der := func(k any) []byte { b, _ := x509.MarshalPKCS8PrivateKey(k); return b }
	for _, tc := range []struct{ name, file, want string }{
		{"missing", filepath.Join(t.TempDir(), "none.pem"), "no such file"},
		{"no key", writePEM(t, "CERTIFICATE", []byte{1}), "no private key"},
		{"garbage", writePEM(t, "PRIVATE KEY", []byte{1, 2, 3}), "parse PRIVATE KEY"},
		{"encrypted", writePEM(t, "ENCRYPTED PRIVATE KEY", []byte{1}), "encrypted"},
		{"RSA 1024", writePEM(t, "PRIVATE KEY", der(small)), "1024 bits"},
		{"P-384", writePEM(t, "PRIVATE KEY", der(p384)), "P-384"},
		{"Ed25519", writePEM(t, "PRIVATE KEY", der(ed)), "unsupported key type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadKey(tc.file, "k")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q in it", err, tc.want)
			}
		})
	}
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func TestSignAndJWKS(t *testing.T) {
	testKeys(t)
	b, err := JWKS(rsaKey, ecKey)
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 {
		t.Fatalf("%d keys", len(set.Keys))
	}
	for i, want := range []map[string]string{{"kid": "rsa1", "alg": "RS256", "kty": "RSA", "use": "sig"}, {"kid": "ec1", "alg": "ES256", "kty": "EC", "crv": "P-256", "use": "sig"}} {
		for f, v := range want {
			if set.Keys[i][f] != v {
				t.Errorf("key %d: %s = %v, want %s", i, f, set.Keys[i][f], v)
			}
		}
		for _, private := range []string{"d", "p", "q", "dp", "dq", "qi"} {
			if _, ok := set.Keys[i][private]; ok {
				t.Errorf("key %d: private member %q published", i, private)
			}
		}
	}
	ks, err := parseJWKS(b)
	if err != nil || len(ks.all) != 2 {
		t.Fatalf("parseJWKS: %v", err)
	}

	tok := mint(t, ecKey, map[string]any{"iss": "https://x", "n": 1})
	h, p, err := Decode(tok)
	if err != nil {
		t.Fatal(err)
	}
	if h["alg"] != "ES256" || h["kid"] != "ec1" || h["typ"] != "JWT" || p["iss"] != "https://x" || p["n"] != json.Number("1") {
		t.Errorf("Decode = %v %v", h, p)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tok := range []string{"", "a.b", "a.b.c.d", "!!!.e30.", "e30.bnVsbA.", "e30.e30gMQ.", "WzFd.e30."} {
		_, _, err := Decode(tok)
		if reason(err) != "malformed token" {
			t.Errorf("Decode(%q): %v", tok, err)
		}
	}
	if _, _, err := Decode(" e30.e30. "); err != nil {
		t.Errorf("Decode of {}.{}: %v", err)
	}
}

// JWKS skips the keys it cannot use and keeps the others.
func TestParseJWKSSkips(t *testing.T) {
	testKeys(t)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	good, _ := JWKS(rsaKey)
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	json.Unmarshal(good, &set)
	entries := []string{string(set.Keys[0])}
	jwkOf := func(pub any, kv ...string) string {
		t.Helper()
		m := map[string]any{}
		switch p := pub.(type) {
		case *rsa.PublicKey:
			m = map[string]any{"kty": "RSA", "n": b64u(p.N.Bytes()), "e": "AQAB"}
		case *ecdsa.PublicKey:
			pt, err := p.Bytes() // 0x04 || x || y
			if err != nil {
				t.Fatal(err)
			}
			n := (len(pt) - 1) / 2
			m = map[string]any{"kty": "EC", "crv": p.Curve.Params().Name, "x": b64u(pt[1 : 1+n]), "y": b64u(pt[1+n:])}
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	rsaPub := &rsaKey2.priv.(*rsa.PrivateKey).PublicKey
	entries = append(entries,
		jwkOf(&small.PublicKey, "kid", "small"),
		jwkOf(&p384.PublicKey, "kid", "p384"),
		jwkOf(rsaPub, "kid", "enc", "use", "enc"),
		jwkOf(rsaPub, "kid", "ps", "alg", "PS256"),
		`{"kty":"oct","k":"c2VjcmV0","kid":"hmac"}`,
		`{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"ed"}`,
		`{"kty":"PQ","kid":"future"}`,
	)
	ks, err := parseJWKS([]byte(`{"keys":[` + strings.Join(entries, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if kids := ks.kids(); len(kids) != 1 || kids[0] != "rsa1" {
		t.Errorf("kids %q, want only rsa1", kids)
	}
}

func TestIssuerHandler(t *testing.T) {
	for _, iss := range []string{"https://issuer.example", "https://issuer.example/tokens"} {
		srv := httptest.NewServer(IssuerHandler(iss, func() []byte { return []byte(`{"keys":[]}`) }))
		defer srv.Close()
		prefix := strings.TrimPrefix(iss, "https://issuer.example")
		for _, tc := range []struct {
			method, path string
			status       int
			body         string
		}{
			{"GET", "/.well-known/openid-configuration", 200, `"jwks_uri":"` + iss + `/jwks"`},
			{"GET", prefix + "/.well-known/openid-configuration", 200, `"issuer":"` + iss + `"`},
			{"GET", prefix + "/jwks", 200, `{"keys":[]}`},
			{"HEAD", "/jwks", 200, ""},
			{"POST", "/jwks", 405, "method not allowed"},
			{"GET", "/other", 404, "not found"},
		} {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.body) {
				t.Errorf("%s %s %s: %d %s", iss, tc.method, tc.path, resp.StatusCode, body)
			}
			if tc.status == 200 && resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, resp.Header.Get("Content-Type"))
			}
		}
	}
}

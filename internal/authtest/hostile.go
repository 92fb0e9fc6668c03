package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// Hostile is one refused token: what a site trusting is (base path
// /store, scopes relative to it) and other (base "/") must answer when
// it is used for Op on Path.
type Hostile struct {
	Name   string
	Token  string
	Op     string // read, write, delete
	Path   string // logical, under /store
	Status int    // 401 (invalid token) or 403 (scope missing)
	Reason string // in the message (and the RFC 6750 error_description)
}

// HostileTokens is the hostile-token suite (more than 40 cases): bad
// claims, bad signatures, algorithm confusion, malformed encodings, scope
// traversal and prefix confusion, create-only tokens overwriting or
// deleting. Paths are under /store; a file /store/f.txt exists.
func HostileTokens(t testing.TB, is, other *Issuer) []Hostile {
	t.Helper()
	now := time.Now()
	tok := func(scope string, extra map[string]any) string { return is.Token(t, scope, extra) }
	rd := "storage.read:/"
	valid := tok(rd, nil)
	parts := strings.Split(valid, ".")
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	ourHeader := map[string]any{"alg": is.Key.Alg(), "kid": is.Key.KID(), "typ": "JWT"}
	claims := is.Claims(rd, nil)
	with := func(h map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	pubDER, err := x509.MarshalPKIXPublicKey(is.Key.Public())
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	tampered := encode(is.Claims("storage.modify:/", nil))

	h := []Hostile{
		{Name: "expired", Token: tok(rd, map[string]any{"exp": now.Add(-time.Hour).Unix()}), Reason: "token expired"},
		{Name: "expired beyond skew", Token: tok(rd, map[string]any{"exp": now.Add(-3 * time.Minute).Unix(), "nbf": nil, "iat": now.Add(-time.Hour).Unix()}), Reason: "token expired"},
		{Name: "nbf in the future", Token: tok(rd, map[string]any{"nbf": now.Add(time.Hour).Unix()}), Reason: "token not yet valid"},
		{Name: "iat in the future", Token: tok(rd, map[string]any{"iat": now.Add(time.Hour).Unix(), "nbf": nil}), Reason: "token issued in the future"},
		{Name: "unknown issuer", Token: tok(rd, map[string]any{"iss": "https://evil.example"}), Reason: "unknown issuer"},
		{Name: "issuer with a trailing path", Token: tok(rd, map[string]any{"iss": is.URL + "/evil"}), Reason: "unknown issuer"},
		{Name: "missing iss", Token: tok(rd, map[string]any{"iss": nil}), Reason: "missing iss"},
		{Name: "wrong audience", Token: tok(rd, map[string]any{"aud": "https://other.site"}), Reason: "wrong audience"},
		{Name: "wrong audience list", Token: tok(rd, map[string]any{"aud": []string{"https://a.site", "https://b.site"}}), Reason: "wrong audience"},
		{Name: "missing audience", Token: tok(rd, map[string]any{"aud": nil}), Reason: "wrong audience"},
		{Name: "alg none", Token: rawJWT(map[string]any{"alg": "none", "typ": "JWT"}, claims, ""), Reason: "unsupported algorithm none"},
		{Name: "alg none with our kid", Token: rawJWT(with(ourHeader, "alg", "none"), claims, ""), Reason: "unsupported algorithm none"},
		{Name: "HS256 keyed with our public key", Token: hmacJWT(with(ourHeader, "alg", "HS256"), claims, pubPEM), Reason: "unsupported algorithm HS256"},
		{Name: "HS256 keyed with our public key DER", Token: hmacJWT(with(ourHeader, "alg", "HS256"), claims, pubDER), Reason: "unsupported algorithm HS256"},
		{Name: "HS512", Token: hmacJWT(with(ourHeader, "alg", "HS512"), claims, pubPEM), Reason: "unsupported algorithm HS512"},
		{Name: "PS256", Token: rawJWT(with(ourHeader, "alg", "PS256"), claims, "c2ln"), Reason: "unsupported algorithm PS256"},
		{Name: "lower-case alg", Token: rawJWT(with(ourHeader, "alg", strings.ToLower(is.Key.Alg())), claims, parts[2]), Reason: "unsupported algorithm"},
		{Name: "unknown kid", Token: signJWT(t, is, with(ourHeader, "kid", "no-such-key"), claims), Reason: "unknown key id"},
		{Name: "kid of another issuer", Token: signJWT(t, other, map[string]any{"alg": other.Key.Alg(), "kid": other.Key.KID(), "typ": "JWT"}, claims), Reason: "unknown key id"},
		{Name: "our kid, another issuer's key", Token: signJWT(t, other, with(ourHeader, "alg", other.Key.Alg()), claims), Reason: "key does not match algorithm"},
		{Name: "attacker key in jwk header", Token: signJWT(t, other, map[string]any{"alg": other.Key.Alg(), "kid": "attacker", "jwk": map[string]any{"kty": "RSA"}}, claims), Reason: "unknown key id"},
		{Name: "attacker jku header", Token: signJWT(t, other, map[string]any{"alg": other.Key.Alg(), "kid": "attacker", "jku": "https://evil.example/jwks"}, claims), Reason: "unknown key id"},
		{Name: "critical header", Token: signJWT(t, is, with(ourHeader, "crit", []string{"exp"}), claims), Reason: "unsupported critical header"},
		{Name: "tampered payload", Token: parts[0] + "." + tampered + "." + parts[2], Reason: "bad signature"},
		{Name: "tampered signature", Token: parts[0] + "." + parts[1] + "." + flip(parts[2], 10), Reason: "bad signature"},
		{Name: "signature of another token", Token: parts[0] + "." + parts[1] + "." + strings.Split(tok("storage.read:/x", nil), ".")[2], Reason: "bad signature"},
		{Name: "empty signature", Token: parts[0] + "." + parts[1] + ".", Reason: "bad signature"},
		{Name: "two parts", Token: parts[0] + "." + parts[1], Reason: "malformed token"},
		{Name: "four parts", Token: valid + ".AAAA", Reason: "malformed token"},
		{Name: "oversized", Token: tok(rd, map[string]any{"pad": strings.Repeat("x", 20<<10)}), Reason: "token too large"},
		{Name: "not base64", Token: "!!!." + parts[1] + "." + parts[2], Reason: "malformed token"},
		{Name: "payload not JSON", Token: parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte("{not json")) + "." + parts[2], Reason: "malformed token"},
		{Name: "newline inside", Token: parts[0] + ".\n" + parts[1] + "." + parts[2], Reason: "malformed token"},
		{Name: "space inside", Token: parts[0] + ". " + parts[1] + "." + parts[2], Reason: "malformed token"},
		{Name: "tab inside", Token: parts[0] + "." + parts[1] + "\t." + parts[2], Reason: "malformed token"},
		{Name: "scope traversal", Token: tok("storage.read:/../etc", nil), Reason: "bad scope"},
		{Name: "scope dot segment", Token: tok("storage.modify:/./x", nil), Reason: "bad scope"},
		{Name: "scope traversal inside", Token: tok("storage.read:/user/../../etc", nil), Reason: "bad scope"},
		{Name: "missing wlcg.ver", Token: tok(rd, map[string]any{"wlcg.ver": nil}), Reason: "missing wlcg.ver"},
		{Name: "wrong wlcg.ver", Token: tok(rd, map[string]any{"wlcg.ver": "2.0"}), Reason: "unsupported wlcg.ver"},
		{Name: "missing sub", Token: tok(rd, map[string]any{"sub": nil}), Reason: "missing sub"},
		{Name: "missing exp", Token: tok(rd, map[string]any{"exp": nil}), Reason: "missing exp"},
		{Name: "exp as a string", Token: tok(rd, map[string]any{"exp": "tomorrow"}), Reason: "bad exp"},
		{Name: "groups not a list", Token: tok(rd, map[string]any{"wlcg.groups": "/cms"}), Reason: "bad wlcg.groups"},
		// Valid tokens without the right scope: 403.
		{Name: "read token writes", Token: valid, Op: "write", Path: "/store/new.txt", Status: 403, Reason: "does not grant storage.create:/new.txt"},
		{Name: "read token deletes", Token: valid, Op: "delete", Path: "/store/f.txt", Status: 403, Reason: "does not grant storage.modify:/f.txt"},
		{Name: "create token overwrites", Token: tok("storage.create:/", nil), Op: "write", Path: "/store/f.txt", Status: 403, Reason: "may create new files here but not replace"},
		{Name: "create token deletes", Token: tok("storage.create:/", nil), Op: "delete", Path: "/store/f.txt", Status: 403, Reason: "storage.modify:/f.txt"},
		{Name: "prefix confusion", Token: tok("storage.modify:/user/alice", nil), Op: "write", Path: "/store/user/alicefoo/x", Status: 403, Reason: "storage.create:/user/alicefoo/x"},
		{Name: "scope of a sibling", Token: tok("storage.read:/user/alice", nil), Op: "read", Path: "/store/f.txt", Status: 403, Reason: "storage.read:/f.txt"},
		{Name: "modify does not read", Token: tok("storage.modify:/", nil), Op: "read", Path: "/store/f.txt", Status: 403, Reason: "storage.read:/f.txt"},
		{Name: "scitokens read writes", Token: tok("read:/", map[string]any{"wlcg.ver": nil, "ver": "scitoken:2.0"}), Op: "write", Path: "/store/new.txt", Status: 403, Reason: "storage.create:/new.txt"},
	}
	for i := range h {
		if h[i].Op == "" {
			h[i].Op, h[i].Path, h[i].Status = "read", "/store/f.txt", 401
		}
	}
	return h
}

func encode(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// rawJWT joins a header, claims and a signature as given.
func rawJWT(h, c map[string]any, sig string) string {
	return encode(h) + "." + encode(c) + "." + sig
}

// hmacJWT signs with HMAC keyed by secret (the algorithm-confusion attack).
func hmacJWT(h, c map[string]any, secret []byte) string {
	in := encode(h) + "." + encode(c)
	hf := sha256.New
	if h["alg"] == "HS512" {
		hf = sha512.New
	}
	m := hmac.New(hf, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signJWT signs header and claims as given with is's private key.
func signJWT(t testing.TB, is *Issuer, h, c map[string]any) string {
	t.Helper()
	pemBytes, err := is.Key.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(pemBytes)
	priv, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	in := encode(h) + "." + encode(c)
	sum := sha256.Sum256([]byte(in))
	var sig []byte
	switch k := priv.(type) {
	case *rsa.PrivateKey:
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	case *ecdsa.PrivateKey:
		var r, s *big.Int
		r, s, err = ecdsa.Sign(rand.Reader, k, sum[:])
		if err == nil {
			sig = make([]byte, 64)
			r.FillBytes(sig[:32])
			s.FillBytes(sig[32:])
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

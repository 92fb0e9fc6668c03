package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// Key is a signing key of an issuer: a private key, its kid and its alg.
type Key struct {
	priv crypto.Signer // *rsa.PrivateKey or *ecdsa.PrivateKey (P-256)
	kid  string
	alg  string
}

// GenerateKey makes a new key for alg "RS256" (2048-bit RSA) or "ES256"
// (P-256). An empty kid is derived from the key (its RFC 7638
// thumbprint).
func GenerateKey(alg, kid string) (*Key, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case algRS256:
		priv, err = rsa.GenerateKey(rand.Reader, minRSABits)
	case algES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		return nil, fmt.Errorf("token: generate key: unsupported algorithm %q (RS256 or ES256)", alg)
	}
	if err != nil {
		return nil, fmt.Errorf("token: generate %s key: %w", alg, err)
	}
	return newKey(priv, kid)
}

// LoadKey reads a PEM private key (PKCS#8, PKCS#1 RSA or SEC 1 EC); the
// alg follows from the key's type. An empty kid is derived from the key.
func LoadKey(pemFile, kid string) (*Key, error) {
	f, err := os.Open(pemFile)
	if err != nil {
		return nil, fmt.Errorf("token: load key: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("token: load key %s: %w", pemFile, err)
	}
	k, err := ParseKeyPEM(data, kid)
	if err != nil {
		return nil, fmt.Errorf("token: load key %s: %w", pemFile, err)
	}
	return k, nil
}

// ParseKeyPEM is LoadKey on PEM data.
func ParseKeyPEM(data []byte, kid string) (*Key, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no private key in PEM data")
		}
		var priv any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			priv, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			priv, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			priv, err = x509.ParseECPrivateKey(block.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("encrypted private keys are not supported")
		default:
			continue // EC PARAMETERS, certificates
		}
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", block.Type, err)
		}
		s, ok := priv.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", priv)
		}
		return newKey(s, kid)
	}
}

func newKey(priv crypto.Signer, kid string) (*Key, error) {
	k := &Key{priv: priv, kid: kid}
	switch p := priv.(type) {
	case *rsa.PrivateKey:
		if p.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("RSA key of %d bits, need %d", p.N.BitLen(), minRSABits)
		}
		k.alg = algRS256
	case *ecdsa.PrivateKey:
		if p.Curve != elliptic.P256() {
			return nil, fmt.Errorf("EC key on %s, need P-256", p.Curve.Params().Name)
		}
		k.alg = algES256
	default:
		return nil, fmt.Errorf("unsupported key type %T (RSA or EC P-256)", priv)
	}
	if k.kid == "" {
		pub, err := k.publicJWK()
		if err != nil {
			return nil, err
		}
		tp, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, err
		}
		k.kid = base64.RawURLEncoding.EncodeToString(tp)
	}
	return k, nil
}

// KID is the key's id, sent as the tokens' "kid".
func (k *Key) KID() string { return k.kid }

// Alg is "RS256" or "ES256".
func (k *Key) Alg() string { return k.alg }

// Public is the public half.
func (k *Key) Public() crypto.PublicKey { return k.priv.Public() }

// MarshalPEM encodes the private key as PKCS#8 PEM.
func (k *Key) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return nil, fmt.Errorf("token: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Sign makes a compact JWS of claims with the header typ "JWT", the key's
// kid and alg. The claims are signed as given: the caller sets iss, sub,
// exp, aud, scope, wlcg.ver...
func (k *Key) Sign(claims map[string]any) (string, error) {
	body, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("token: sign: %w", err)
	}
	h := jws.NewHeaders()
	if err := h.Set(jws.TypeKey, "JWT"); err != nil {
		return "", fmt.Errorf("token: sign: %w", err)
	}
	if err := h.Set(jws.KeyIDKey, k.kid); err != nil {
		return "", fmt.Errorf("token: sign: %w", err)
	}
	out, err := jws.Sign(body, jws.WithKey(jwsAlg(k.alg), k.priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		return "", fmt.Errorf("token: sign: %w", err)
	}
	return string(out), nil
}

func (k *Key) publicJWK() (jwk.Key, error) {
	pub, err := jwk.Import(k.priv.Public())
	if err != nil {
		return nil, fmt.Errorf("token: public key: %w", err)
	}
	return pub, nil
}

// JWKS is the public JWK set of keys (kid, alg, use "sig"), as an issuer
// publishes it at its jwks_uri.
func JWKS(keys ...*Key) ([]byte, error) {
	set := jwk.NewSet()
	for _, k := range keys {
		pub, err := k.publicJWK()
		if err != nil {
			return nil, err
		}
		for name, val := range map[string]any{jwk.KeyIDKey: k.kid, jwk.AlgorithmKey: jwsAlg(k.alg), jwk.KeyUsageKey: "sig"} {
			if err := pub.Set(name, val); err != nil {
				return nil, fmt.Errorf("token: JWKS: %w", err)
			}
		}
		if err := set.AddKey(pub); err != nil {
			return nil, fmt.Errorf("token: JWKS: %w", err)
		}
	}
	out, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("token: JWKS: %w", err)
	}
	return out, nil
}

// Decode returns a token's header and claims without verifying anything
// (for `wanda token inspect`). Numbers are json.Number. Errors never
// quote the token.
func Decode(raw string) (header, payload map[string]any, err error) {
	parts := strings.Split(strings.TrimSpace(raw), ".")
	if len(parts) != 3 {
		return nil, nil, fmt.Errorf("%d parts, want 3: %w", len(parts), errMalformed)
	}
	if header, err = decodeAny(parts[0]); err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	if payload, err = decodeAny(parts[1]); err != nil {
		return nil, nil, fmt.Errorf("payload: %w", err)
	}
	return header, payload, nil
}

func decodeAny(part string) (map[string]any, error) {
	data, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(part, "="))
	if err != nil {
		return nil, fmt.Errorf("not base64url: %w", errMalformed)
	}
	d := json.NewDecoder(strings.NewReader(string(data)))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object: %w", errMalformed)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON object: %w", errMalformed)
	}
	return m, nil
}

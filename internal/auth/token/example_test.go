package token_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/wanda-fed/wanda/internal/auth/token"
)

// An issuer's key, its JWKS given to the verifier as a file, and a WLCG
// token checked against the scopes it grants.
func Example() {
	key, err := token.GenerateKey("ES256", "demo-1")
	if err != nil {
		log.Fatal(err)
	}
	jwks, _ := token.JWKS(key)
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(file, jwks, 0o600); err != nil {
		log.Fatal(err)
	}

	v, err := token.New(token.Config{
		Issuers:   []token.Issuer{{URL: "https://demo.example", BasePath: "/cms", JWKSFile: file}},
		Audiences: []string{"https://wanda.example"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	raw, _ := key.Sign(map[string]any{
		"iss":      "https://demo.example",
		"sub":      "alice",
		"aud":      "https://wanda.example",
		"exp":      time.Now().Add(time.Hour).Unix(),
		"wlcg.ver": "1.0",
		"scope":    "storage.read:/store storage.modify:/store/user/alice",
	})
	c, err := v.Verify(raw)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Subject, c.Profile, c.Scopes)
	fmt.Println(c.Allows(token.Read, "/cms/store/data/f.root"))
	fmt.Println(c.Allows(token.Create, "/cms/store/user/alice/new.root"))
	fmt.Println(c.Allows(token.Read, "/cms/storefoo"))

	_, err = v.Verify(raw[:len(raw)-4])
	fmt.Println(err)
	// Output:
	// alice wlcg [storage.read:/cms/store storage.modify:/cms/store/user/alice]
	// true
	// true
	// false
	// invalid token: bad signature
}

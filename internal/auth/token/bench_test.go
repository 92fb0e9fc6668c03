package token

import (
	"strconv"
	"testing"
)

// BenchmarkVerifyCached is the hot path: a client repeating its token.
func BenchmarkVerifyCached(b *testing.B) {
	v := offlineVerifier(b, nil)
	for _, k := range []*Key{rsaKey, ecKey} {
		tok := mint(b, k, claimsFor(issA))
		b.Run(k.Alg(), func(b *testing.B) {
			if _, err := v.Verify(tok); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(tok)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(k.Alg()+"/parallel", func(b *testing.B) {
			b.SetBytes(int64(len(tok)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := v.Verify(tok); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkVerifyUncached is a new token every time: parsing, signature
// and claims.
func BenchmarkVerifyUncached(b *testing.B) {
	v := offlineVerifier(b, func(c *Config) { c.CacheEntries = -1 })
	for _, k := range []*Key{rsaKey, ecKey} {
		b.Run(k.Alg(), func(b *testing.B) {
			tok := mint(b, k, claimsFor(issA))
			b.SetBytes(int64(len(tok)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyRefused is what a client sending garbage costs.
func BenchmarkVerifyRefused(b *testing.B) {
	v := offlineVerifier(b, nil)
	for name, tok := range map[string]string{
		"bad signature":  mint(b, strayKey, claimsFor(issA)),
		"unknown issuer": mint(b, rsaKey, claimsFor("https://evil.example")),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(tok); err == nil {
					b.Fatal("verified")
				}
			}
		})
	}
}

func BenchmarkSign(b *testing.B) {
	testKeys(b)
	for _, k := range []*Key{rsaKey, ecKey} {
		b.Run(k.Alg(), func(b *testing.B) {
			c := claimsFor(issA)
			i := 0
			for b.Loop() {
				c["jti"] = strconv.Itoa(i)
				i++
				if _, err := k.Sign(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

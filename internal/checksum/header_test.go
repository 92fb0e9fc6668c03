package checksum

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"testing"
)

func TestParseWantDigest(t *testing.T) {
	tests := []struct {
		h    string
		want []Want
	}{
		{"", nil},
		{"adler32", []Want{{Adler32, 1}}},
		{"ADLER32", []Want{{Adler32, 1}}},
		{"adler32, md5;q=0.5", []Want{{Adler32, 1}, {MD5, 0.5}}},
		{"md5;q=0.3, SHA-256;q=0.9, adler32", []Want{{Adler32, 1}, {SHA256, 0.9}, {MD5, 0.3}}},
		{"md5;q=0.3,sha256;q=0.9,crc32c;q=0.6", []Want{{SHA256, 0.9}, {CRC32C, 0.6}, {MD5, 0.3}}},
		{"md5, adler32", []Want{{MD5, 1}, {Adler32, 1}}}, // ties keep the client's order
		{"md5 ; Q=0.5", []Want{{MD5, 0.5}}},
		{"md5;charset=x;q=0.25", []Want{{MD5, 0.25}}},
		{"md5;q=bogus", []Want{{MD5, 1}}},
		{"md5;q=0, adler32;q=0.1", []Want{{Adler32, 0.1}}},
		{"md5;q=-1", nil},
		{"UNIXcksum, sha;q=1, SHA-512, adler32;q=0.1", []Want{{Adler32, 0.1}}},
		{" , ,adler32,, ", []Want{{Adler32, 1}}},
	}
	for _, tc := range tests {
		if got := ParseWantDigest(tc.h); !slices.Equal(got, tc.want) {
			t.Errorf("ParseWantDigest(%q) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestParseWantReprDigest(t *testing.T) {
	tests := []struct {
		h    string
		want []Want
	}{
		{"", nil},
		{"sha-256=10, adler=3", []Want{{SHA256, 10}, {Adler32, 3}}},
		{"adler=3, sha-256=10", []Want{{SHA256, 10}, {Adler32, 3}}},
		{"adler", []Want{{Adler32, 1}}},
		{"md5=0, sha-256=1", []Want{{SHA256, 1}}},
		{"sha-256=x, crc32c=5", []Want{{CRC32C, 5}}},
		{"sha-512=10, unixsum=9, adler32= 2", []Want{{Adler32, 2}}},
		{"sha-256=-3", nil},
	}
	for _, tc := range tests {
		if got := ParseWantReprDigest(tc.h); !slices.Equal(got, tc.want) {
			t.Errorf("ParseWantReprDigest(%q) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

var (
	sumMD5    = md5.Sum([]byte("abc"))
	sumSHA256 = sha256.Sum256([]byte("abc"))
	b64       = base64.StdEncoding.EncodeToString
)

func TestDigestValue(t *testing.T) {
	tests := []struct {
		alg  string
		sum  []byte
		want string
	}{
		{Adler32, []byte{0x0a, 0x1b, 0x2c, 0x3d}, "adler32=0a1b2c3d"},
		{Adler32, []byte{0, 0, 0, 1}, "adler32=00000001"},
		{CRC32C, []byte{0, 0xab, 0, 0}, "crc32c=00ab0000"},
		{MD5, sumMD5[:], "md5=kAFQmDzST7DWlj99KOF/cg=="},
		{SHA256, sumSHA256[:], "sha-256=ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="},
	}
	for _, tc := range tests {
		if got := DigestValue(tc.alg, tc.sum); got != tc.want {
			t.Errorf("DigestValue(%s) = %q, want %q", tc.alg, got, tc.want)
		}
		// What is written is read back.
		m, err := ParseDigest(tc.want)
		if err != nil || !bytes.Equal(m[tc.alg], tc.sum) {
			t.Errorf("ParseDigest(%q) = %x, %v", tc.want, m, err)
		}
	}
}

func TestReprDigestValue(t *testing.T) {
	tests := []struct {
		alg  string
		sum  []byte
		want string
	}{
		{Adler32, []byte{0, 0, 0, 1}, "adler=:AAAAAQ==:"},
		{CRC32C, []byte{1, 2, 3, 4}, "crc32c=:AQIDBA==:"},
		{MD5, sumMD5[:], "md5=:kAFQmDzST7DWlj99KOF/cg==:"},
		{SHA256, sumSHA256[:], "sha-256=:ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=:"},
	}
	for _, tc := range tests {
		if got := ReprDigestValue(tc.alg, tc.sum); got != tc.want {
			t.Errorf("ReprDigestValue(%s) = %q, want %q", tc.alg, got, tc.want)
		}
		m, err := ParseReprDigest(tc.want)
		if err != nil || !bytes.Equal(m[tc.alg], tc.sum) {
			t.Errorf("ParseReprDigest(%q) = %x, %v", tc.want, m, err)
		}
	}
}

func TestParseDigest(t *testing.T) {
	adl := []byte{0x0a, 0x1b, 0x2c, 0x3d}
	tests := []struct {
		h    string
		want map[string][]byte
	}{
		{"", map[string][]byte{}},
		{"adler32=0a1b2c3d", map[string][]byte{Adler32: adl}},
		{"ADLER32=0A1B2C3D", map[string][]byte{Adler32: adl}},
		{"adler32=" + b64(adl), map[string][]byte{Adler32: adl}},
		{"adler32=a1b2c3d", map[string][]byte{Adler32: adl}}, // no leading zero
		{"adler32=1", map[string][]byte{Adler32: {0, 0, 0, 1}}},
		{"crc32c=00000001", map[string][]byte{CRC32C: {0, 0, 0, 1}}},
		{"md5=" + b64(sumMD5[:]), map[string][]byte{MD5: sumMD5[:]}},
		{"MD5=" + hex.EncodeToString(sumMD5[:]), map[string][]byte{MD5: sumMD5[:]}},
		{"SHA-256=" + b64(sumSHA256[:]), map[string][]byte{SHA256: sumSHA256[:]}},
		{"sha256=" + hex.EncodeToString(sumSHA256[:]), map[string][]byte{SHA256: sumSHA256[:]}},
		{"UNIXsum=123, adler32=0a1b2c3d, sha-512=zzz", map[string][]byte{Adler32: adl}},
		{"adler32=0a1b2c3d , md5=" + b64(sumMD5[:]), map[string][]byte{Adler32: adl, MD5: sumMD5[:]}},
		{"adler32", map[string][]byte{}},
	}
	for _, tc := range tests {
		got, err := ParseDigest(tc.h)
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("ParseDigest(%q) = %x, %v; want %x", tc.h, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if !bytes.Equal(got[k], v) {
				t.Errorf("ParseDigest(%q)[%s] = %x, want %x", tc.h, k, got[k], v)
			}
		}
	}
	for _, bad := range []string{
		"adler32=zzzz",
		"adler32=",
		"adler32=123456789",
		"adler32=-1",
		"adler32=0x1a",
		"adler32=" + b64([]byte{1, 2, 3}),
		"md5=abc",
		"md5=",
		"md5=" + b64(sumSHA256[:]),
		"md5=" + hex.EncodeToString(sumMD5[:15]),
		"sha-256=" + b64(sumMD5[:]),
		"sha-256=" + b64(sumSHA256[:])[:40],
		"adler32=0a1b2c3d, md5=garbage",
	} {
		if got, err := ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) = %x, want an error", bad, got)
		}
	}
}

func TestParseReprDigest(t *testing.T) {
	got, err := ParseReprDigest("sha-256=:" + b64(sumSHA256[:]) + ":, unknown=:AAAA:, adler=:AAAAAQ==:")
	if err != nil || !bytes.Equal(got[SHA256], sumSHA256[:]) || !bytes.Equal(got[Adler32], []byte{0, 0, 0, 1}) || len(got) != 2 {
		t.Errorf("ParseReprDigest = %x, %v", got, err)
	}
	for _, bad := range []string{
		"sha-256=" + b64(sumSHA256[:]),
		"sha-256=:" + b64(sumSHA256[:]),
		"md5=:!!:",
		"md5=:",
		"sha-256=::",
		"sha-256=:" + b64(sumMD5[:]) + ":",
		"adler=:AAAA:",
	} {
		if got, err := ParseReprDigest(bad); err == nil {
			t.Errorf("ParseReprDigest(%q) = %x, want an error", bad, got)
		}
	}
}

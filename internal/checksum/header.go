package checksum

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Want is one algorithm a client asked for, with its preference (q-value for
// Want-Digest, integer 1-10 for Want-Repr-Digest; 0 means "not acceptable").
type Want struct {
	Alg  string // canonical name
	Pref float64
}

// ParseWantDigest parses RFC 3230 Want-Digest ("adler32, md5;q=0.5") and
// returns the known algorithms, most preferred first. Unknown algorithms are
// dropped: RFC 3230 says to ignore what a server does not support.
func ParseWantDigest(h string) []Want {
	var out []Want
	for _, item := range strings.Split(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(k, "q") {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
		}
		if alg := Canonical(name); alg != "" && q > 0 {
			out = append(out, Want{alg, q})
		}
	}
	sortWants(out)
	return out
}

// ParseWantReprDigest parses RFC 9530 Want-Repr-Digest, a structured-field
// dictionary of integers ("sha-256=10, adler=3"). A bare key means 1.
func ParseWantReprDigest(h string) []Want {
	var out []Want
	for _, item := range strings.Split(h, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		pref := 1.0
		if ok {
			v, err := strconv.Atoi(strings.TrimSpace(val))
			if err != nil {
				continue
			}
			pref = float64(v)
		}
		if alg := Canonical(name); alg != "" && pref > 0 {
			out = append(out, Want{alg, pref})
		}
	}
	sortWants(out)
	return out
}

func sortWants(w []Want) {
	slices.SortStableFunc(w, func(a, b Want) int {
		switch {
		case a.Pref > b.Pref:
			return -1
		case a.Pref < b.Pref:
			return 1
		}
		return 0
	})
}

// DigestValue formats one RFC 3230 instance-digest: "adler32=0a1b2c3d",
// "md5=<base64>". adler32 and crc32c are hex, as XRootD and davix expect;
// md5 and sha-256 base64, as the RFC's registry says.
func DigestValue(alg string, sum []byte) string {
	switch alg {
	case Adler32, CRC32C:
		return alg + "=" + hex.EncodeToString(sum)
	case SHA256:
		return "sha-256=" + base64.StdEncoding.EncodeToString(sum)
	}
	return alg + "=" + base64.StdEncoding.EncodeToString(sum)
}

// ReprDigestValue formats one RFC 9530 dictionary member: "adler=:AAECAw==:".
func ReprDigestValue(alg string, sum []byte) string {
	name := alg
	switch alg {
	case Adler32:
		name = "adler"
	case SHA256:
		name = "sha-256"
	}
	return name + "=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}

// ParseDigest parses an RFC 3230 Digest header ("adler32=0a1b2c3d,
// md5=...") into canonical alg -> raw digest, skipping unknown algorithms.
// A known algorithm with an undecodable value is an error: an upload must
// not succeed against a digest nobody could check.
func ParseDigest(h string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, item := range strings.Split(h, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		alg := Canonical(name)
		if !ok || alg == "" {
			continue
		}
		sum, err := decodeDigest(alg, strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("digest %s: %w", name, err)
		}
		out[alg] = sum
	}
	return out, nil
}

// ParseReprDigest parses RFC 9530 Repr-Digest / Content-Digest members
// ("sha-256=:base64:").
func ParseReprDigest(h string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, item := range strings.Split(h, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		alg := Canonical(name)
		if !ok || alg == "" {
			continue
		}
		val = strings.TrimSpace(val)
		if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			return nil, fmt.Errorf("Repr-Digest %s: not a byte sequence", name)
		}
		sum, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
		if err != nil {
			return nil, fmt.Errorf("Repr-Digest %s: %w", name, err)
		}
		if len(sum) != digestSize[alg] {
			return nil, fmt.Errorf("Repr-Digest %s: %d bytes, want %d", name, len(sum), digestSize[alg])
		}
		out[alg] = sum
	}
	return out, nil
}

// digestSize is the length of each algorithm's digest in bytes.
var digestSize = map[string]int{Adler32: 4, CRC32C: 4, MD5: 16, SHA256: 32}

// decodeDigest accepts hex or base64 for the 4-byte sums (both are seen in
// the wild) and base64 (or hex) for the others, checking the length.
func decodeDigest(alg, v string) ([]byte, error) {
	want := digestSize[alg]
	if b, err := hex.DecodeString(v); err == nil && len(b) == want {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(v); err == nil && len(b) == want {
		return b, nil
	}
	// adler32 written without leading zeros ("adler32=1a2b3c").
	if want == 4 && len(v) < 8 {
		if n, err := strconv.ParseUint(v, 16, 32); err == nil {
			return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, nil
		}
	}
	return nil, fmt.Errorf("cannot decode %q as a %d-byte digest", v, want)
}

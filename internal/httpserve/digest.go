package httpserve

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
)

// addDigests answers Want-Digest (RFC 3230, Digest header) and
// Want-Repr-Digest (RFC 9530, Repr-Digest header) with the most preferred
// known algorithm of each. Unknown algorithms are ignored, as both RFCs ask;
// a backend without checksums simply adds nothing.
//
// A GET of a large file (over inlineDigestMax) gets a checksum only when
// one is cached: computing it would read the whole file before the first
// byte (seconds for a GiB; twenty third-party copies of 1 GiB files asking
// at once stalled a link for 7 s). Clients ask apart, beside the data
// (HEAD, which computes); wanda's engine does when the answer has none.
func (h *Handler) addDigests(r *http.Request, hdr http.Header, t target, size int64) error {
	wd, wrd := r.Header.Get("Want-Digest"), r.Header.Get("Want-Repr-Digest")
	if wd == "" && wrd == "" {
		return nil
	}
	compute := r.Method != http.MethodGet || size <= inlineDigestMax
	if wd != "" {
		if alg := h.pick(checksum.ParseWantDigest(wd)); alg != "" {
			sum, err := h.checksum(r.Context(), t, alg, compute)
			if err != nil {
				return err
			}
			if sum != nil {
				hdr.Set("Digest", checksum.DigestValue(alg, sum))
			}
		}
	}
	if wrd != "" {
		if alg := h.pick(checksum.ParseWantReprDigest(wrd)); alg != "" {
			sum, err := h.checksum(r.Context(), t, alg, compute)
			if err != nil {
				return err
			}
			if sum != nil {
				hdr.Set("Repr-Digest", checksum.ReprDigestValue(alg, sum))
			}
		}
	}
	return nil
}

func (h *Handler) pick(wants []checksum.Want) string {
	for _, w := range wants {
		if h.opts.Checksums == nil || containsFold(h.opts.Checksums, w.Alg) {
			return w.Alg
		}
	}
	return ""
}

// inlineDigestMax is the largest file a GET's Want-Digest is answered
// for with a checksum computed on the spot (a few ms of reading).
const inlineDigestMax = 16 << 20

// checksum asks the backend; nil, nil when it cannot compute checksums,
// or, without compute, when it has none cached.
func (h *Handler) checksum(ctx context.Context, t target, alg string, compute bool) ([]byte, error) {
	if !compute {
		if cc, ok := t.export.Backend.(storage.CachedChecksummer); ok {
			if sum, ok := cc.CachedChecksum(ctx, t.rel, alg); ok {
				return sum, nil
			}
		}
		return nil, nil
	}
	cs, ok := t.export.Backend.(storage.Checksummer)
	if !ok {
		return nil, nil
	}
	sum, err := cs.Checksum(ctx, t.rel, alg)
	if errors.Is(err, storage.ErrUnsupported) {
		return nil, nil
	}
	return sum, err
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(checksum.Canonical(x), s) {
			return true
		}
	}
	return false
}

// uploadDigests collects the digests a client sent with a PUT (Digest,
// Content-Digest, Repr-Digest, Content-MD5) to check the received bytes
// against. A malformed value for a known algorithm is a 400.
func uploadDigests(r *http.Request) (map[string][]byte, error) {
	out := map[string][]byte{}
	if v := r.Header.Get("Digest"); v != "" {
		m, err := checksum.ParseDigest(v)
		if err != nil {
			return nil, Errorf(http.StatusBadRequest, "%v", err)
		}
		for k, s := range m {
			out[k] = s
		}
	}
	for _, name := range []string{"Content-Digest", "Repr-Digest"} {
		if v := r.Header.Get(name); v != "" {
			m, err := checksum.ParseReprDigest(v)
			if err != nil {
				return nil, Errorf(http.StatusBadRequest, "%s: %v", name, err)
			}
			for k, s := range m {
				out[k] = s
			}
		}
	}
	if v := r.Header.Get("Content-MD5"); v != "" {
		m, err := checksum.ParseDigest("md5=" + v)
		if err != nil {
			return nil, Errorf(http.StatusBadRequest, "Content-MD5: %v", err)
		}
		out[checksum.MD5] = m[checksum.MD5]
	}
	return out, nil
}

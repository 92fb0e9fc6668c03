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
func (h *Handler) addDigests(r *http.Request, hdr http.Header, t target) error {
	wd, wrd := r.Header.Get("Want-Digest"), r.Header.Get("Want-Repr-Digest")
	if wd == "" && wrd == "" {
		return nil
	}
	if wd != "" {
		if alg := h.pick(checksum.ParseWantDigest(wd)); alg != "" {
			sum, err := h.checksum(r.Context(), t, alg)
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
			sum, err := h.checksum(r.Context(), t, alg)
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

// checksum asks the backend; nil, nil when it cannot compute checksums.
func (h *Handler) checksum(ctx context.Context, t target, alg string) ([]byte, error) {
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

package httpserve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
)

// put stores the body atomically: the backend writes a temp file, and only
// a body that arrived whole (Content-Length reached, digests matching) is
// committed under the name. A short body, a disconnect or a mismatch aborts
// and leaves nothing behind.
func (h *Handler) put(w http.ResponseWriter, r *http.Request) error {
	t, err := h.open(r, auth.Write)
	if err != nil {
		return err
	}
	if t.rel == "" || strings.HasSuffix(r.URL.Path, "/") {
		return Errorf(http.StatusConflict, "%s: cannot PUT onto a directory", t.URLPath())
	}
	if r.Header.Get("Content-Range") != "" {
		// Partial PUT would need read-modify-write; refusing is what RFC
		// 9110 §14.5 asks of servers that do not support it.
		return Errorf(http.StatusNotImplemented, "partial PUT (Content-Range) is not supported")
	}
	digests, err := uploadDigests(r)
	if err != nil {
		return err
	}
	noReplace := strings.EqualFold(strings.TrimSpace(r.Header.Get("Overwrite")), "F") ||
		strings.TrimSpace(r.Header.Get("If-None-Match")) == "*"
	be := t.export.Backend
	existed := false
	if fi, err := be.Stat(r.Context(), t.rel); err == nil {
		if fi.IsDir {
			return Errorf(http.StatusConflict, "%s is a directory", t.URLPath())
		}
		existed = true
		if noReplace {
			return Errorf(http.StatusPreconditionFailed, "%s exists and the request forbids replacing it", t.URLPath())
		}
		if im := r.Header.Get("If-Match"); im != "" && !etagListMatch(im, ETag(fi), true) {
			return Errorf(http.StatusPreconditionFailed, "%s: If-Match does not match the current ETag", t.URLPath())
		}
	} else if r.Header.Get("If-Match") != "" {
		return Errorf(http.StatusPreconditionFailed, "%s: If-Match on a file that does not exist", t.URLPath())
	}
	up, err := be.Create(r.Context(), t.rel, storage.CreateOptions{
		NoReplace: noReplace, MakeParents: h.opts.MakeParents, Size: r.ContentLength,
	})
	if errors.Is(err, storage.ErrNotFound) {
		return Errorf(http.StatusConflict, "%s: parent directory does not exist (and make_parents is off)", t.URLPath())
	}
	if errors.Is(err, storage.ErrNotDir) {
		return Errorf(http.StatusConflict, "%s: a parent is not a directory", t.URLPath())
	}
	if err != nil {
		return err
	}
	defer up.Abort()
	var dst io.Writer = up
	var sums *checksum.Multi
	if len(digests) > 0 {
		algs := make([]string, 0, len(digests))
		for a := range digests {
			algs = append(algs, a)
		}
		slices.Sort(algs)
		sums = checksum.NewMulti(algs)
		dst = io.MultiWriter(up, sums)
	}
	n, err := io.Copy(dst, r.Body)
	if err != nil {
		// A body that ended early is answered 400 although net/http has
		// cancelled the context on that read error: a client that
		// half-closed its side is still listening.
		if isCancel(r.Context().Err()) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return r.Context().Err()
		}
		return Errorf(http.StatusBadRequest, "%s: upload interrupted after %d bytes: %v", t.URLPath(), n, err)
	}
	if r.ContentLength >= 0 && n != r.ContentLength {
		return Errorf(http.StatusBadRequest, "%s: got %d of %d bytes", t.URLPath(), n, r.ContentLength)
	}
	if sums != nil {
		for alg, got := range sums.Sums() {
			if want := digests[alg]; !bytes.Equal(want, got) {
				return Errorf(http.StatusBadRequest, "%s: %s digest mismatch: client sent %s, received data has %s; nothing stored",
					t.URLPath(), alg, checksum.Hex(want), checksum.Hex(got))
			}
		}
	}
	fi, err := up.Commit(r.Context())
	if errors.Is(err, storage.ErrExist) {
		return Errorf(http.StatusPreconditionFailed, "%s was created meanwhile and the request forbids replacing it", t.URLPath())
	}
	if err != nil {
		return err
	}
	w.Header().Set("ETag", ETag(fi))
	if existed {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	w.Header().Set("Location", t.URLPath())
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, "created %s (%d bytes)\n", t.URLPath(), fi.Size)
	return nil
}

package httpserve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/storage"
)

// put stores the body atomically: the backend writes a temp file, and only
// a body that arrived whole (Content-Length reached, digests matching) is
// committed under the name. A short body, a disconnect or a mismatch aborts
// and leaves nothing behind.
func (h *Handler) put(w http.ResponseWriter, r *http.Request) error {
	t, err := h.openWrite(r)
	if err != nil {
		return err
	}
	if t.rel == "" || strings.HasSuffix(r.URL.Path, "/") {
		return Errorf(http.StatusConflict, "%s: cannot PUT onto a directory", t.URLPath())
	}
	if r.Header.Get("Content-Range") != "" || r.Header.Get(hdrUploadID) != "" {
		return h.putPart(w, r, t) // one part of a parallel upload (putparts.go)
	}
	digests, err := uploadDigests(r)
	if err != nil {
		return err
	}
	noReplace := t.noReplace(r)
	be := t.export.Backend
	existed, err := putPreconditions(r.Context(), be, t, noReplace, r.Header.Get("If-Match"))
	if err != nil {
		return err
	}
	up, err := be.Create(r.Context(), t.rel, storage.CreateOptions{
		NoReplace: noReplace, MakeParents: h.opts.MakeParents, Size: r.ContentLength,
	})
	if err != nil {
		return createErr(t, err)
	}
	defer up.Abort()
	monitor.FromContext(r.Context()).Opened()
	var dst io.Writer = up
	body := &bodyReader{r: r.Body}
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
	n, err := h.copyBody(r.Context(), dst, body)
	if err != nil && errors.Is(err, errBodyRead) {
		// A body that ended early is answered 400 although net/http has
		// cancelled the context on that read error: a client that
		// half-closed its side is still listening.
		if isCancel(r.Context().Err()) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return r.Context().Err()
		}
		return Errorf(http.StatusBadRequest, "%s: upload interrupted after %d bytes: %v", t.URLPath(), n, body.err)
	}
	if err != nil {
		// The storage's: no space (507), over quota (507), too large
		// (413), I/O error (500)...
		return fmt.Errorf("%s: storing the upload failed after %d bytes: %w", t.URLPath(), n, err)
	}
	if r.ContentLength >= 0 && n != r.ContentLength {
		return Errorf(http.StatusBadRequest, "%s: got %d of %d bytes", t.URLPath(), n, r.ContentLength)
	}
	var verified map[string][]byte
	if sums != nil {
		verified = sums.Sums()
		for alg, got := range verified {
			if want := digests[alg]; !bytes.Equal(want, got) {
				return digestMismatch(t.URLPath(), alg, want, got, "")
			}
		}
	}
	fi, err := up.Commit(r.Context())
	if errors.Is(err, storage.ErrExist) {
		return t.existsErr(true)
	}
	if err != nil {
		return err
	}
	setVerified(w, verified)
	return answerStored(w, t, fi, existed)
}

// errBodyRead marks an error reading the request body (the client's
// side), told apart from the storage's errors writing it.
var errBodyRead = errors.New("reading the request body")

// bodyReader marks its errors (not io.EOF) with errBodyRead.
type bodyReader struct {
	r   io.Reader
	err error // the last error, unmarked
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
		err = fmt.Errorf("%w: %w", errBodyRead, err)
	}
	return n, err
}

// setVerified tells the client which of its digests the stored bytes were
// checked against: the answer to a PUT carries Digest with the stored
// file's checksums (RFC 3230 §4.3.2), so a client knows its copy was
// verified end to end without asking again (docs/protocol.md).
func setVerified(w http.ResponseWriter, sums map[string][]byte) {
	var vs []string
	for _, alg := range slices.Sorted(maps.Keys(sums)) {
		vs = append(vs, checksum.DigestValue(alg, sums[alg]))
	}
	if len(vs) > 0 {
		w.Header().Set("Digest", strings.Join(vs, ","))
	}
}

// noReplaceAsked reports "Overwrite: F" (WebDAV) or "If-None-Match: *".
func noReplaceAsked(r *http.Request) bool {
	return strings.EqualFold(strings.TrimSpace(r.Header.Get("Overwrite")), "F") ||
		strings.TrimSpace(r.Header.Get("If-None-Match")) == "*"
}

// putPreconditions checks the target of an upload: not a directory, absent
// when noReplace, matching ifMatch (an If-Match value) when given. existed
// tells 204 from 201.
func putPreconditions(ctx context.Context, be storage.Backend, t target, noReplace bool, ifMatch string) (existed bool, err error) {
	fi, err := be.Stat(ctx, t.rel)
	if err != nil {
		if ifMatch != "" {
			return false, Errorf(http.StatusPreconditionFailed, "%s: If-Match on a file that does not exist", t.URLPath())
		}
		return false, nil
	}
	if fi.IsDir {
		return true, Errorf(http.StatusConflict, "%s is a directory", t.URLPath())
	}
	if noReplace {
		return true, t.existsErr(false)
	}
	if ifMatch != "" && !etagListMatch(ifMatch, ETag(fi), true) {
		return true, Errorf(http.StatusPreconditionFailed, "%s: If-Match does not match the current ETag", t.URLPath())
	}
	return true, nil
}

// createErr turns a failed Create into the answer for an upload: a missing
// or non-directory parent is a 409, as for MKCOL; a target that appeared
// since the preconditions were checked, under an upload that may not
// replace it, a 412 as if it had been there (another create-only upload
// won the race).
func createErr(t target, err error) error {
	if errors.Is(err, storage.ErrExist) {
		return t.existsErr(true)
	}
	if errors.Is(err, storage.ErrNotFound) {
		return Errorf(http.StatusConflict, "%s: parent directory does not exist (and make_parents is off)", t.URLPath())
	}
	if errors.Is(err, storage.ErrNotDir) {
		return Errorf(http.StatusConflict, "%s: a parent is not a directory", t.URLPath())
	}
	return err
}

// answerStored answers a committed upload: 204 when it replaced a file,
// else 201 with Location.
func answerStored(w http.ResponseWriter, t target, fi storage.FileInfo, existed bool) error {
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

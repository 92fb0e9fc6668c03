package httpserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
)

// TestWriteStatuses: the storage's errors on the write path answer the
// statuses of docs/operations.md ("Status codes of the write path").
func TestWriteStatuses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{storage.ErrNoSpace, http.StatusInsufficientStorage},
		{storage.ErrOverQuota, http.StatusInsufficientStorage},
		{storage.ErrTooLarge, http.StatusRequestEntityTooLarge},
		{storage.ErrReadOnly, http.StatusForbidden},
		{storage.ErrPermission, http.StatusForbidden},
		{storage.ErrNameTooLong, http.StatusInternalServerError}, // never alone: with ErrBadPath
		{fmt.Errorf("%w: %w", storage.ErrBadPath, storage.ErrNameTooLong), http.StatusBadRequest},
		{storage.ErrExist, http.StatusConflict},
		{storage.ErrIsDir, http.StatusConflict},
		{storage.ErrShortWrite, http.StatusBadRequest},
		{syscall.EIO, http.StatusInternalServerError},
	} {
		if got, _ := statusOf(fmt.Errorf("write \"x\": %w", tc.err)); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestPutStorageErrorVsBodyError: a PUT whose storage fails answers the
// storage's status (a full disk: 507) and aborts the upload; one whose
// body breaks answers 400.
func TestPutStorageErrorVsBodyError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		werr    error
		body    io.Reader
		want    int
		wantMsg string
	}{
		{"no space", fmt.Errorf("write: %w: %w", storage.ErrNoSpace, syscall.ENOSPC), strings.NewReader(strings.Repeat("x", 100)), 507, "no space"},
		{"quota", fmt.Errorf("write: %w: %w", storage.ErrOverQuota, syscall.EDQUOT), strings.NewReader(strings.Repeat("x", 100)), 507, "quota"},
		{"too large", fmt.Errorf("write: %w: %w", storage.ErrTooLarge, syscall.EFBIG), strings.NewReader(strings.Repeat("x", 100)), 413, "too large"},
		{"out of descriptors", fmt.Errorf("write: %w: %w", storage.ErrOverloaded, syscall.EMFILE), strings.NewReader(strings.Repeat("x", 100)), 503, "file descriptors"},
		{"body breaks", nil, io.MultiReader(strings.NewReader("abc"), errReader{io.ErrUnexpectedEOF}), 400, "interrupted after 3 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &failingBackend{werr: tc.werr, after: 10}
			ns, err := storage.NewNamespace(storage.Export{Prefix: "/w", Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			h := New(Options{Namespace: ns, MaxRanges: 10, Auth: auth.ExportPolicy{Rules: []auth.ExportRule{{Prefix: "/w"}}}})
			req := httptest.NewRequest(http.MethodPut, "/w/f", tc.body)
			req.ContentLength = 100
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.wantMsg) {
				t.Errorf("status %d %q, want %d with %q", rec.Code, rec.Body, tc.want, tc.wantMsg)
			}
			if ra := rec.Header().Get("Retry-After"); (tc.want == 503) != (ra != "") {
				t.Errorf("Retry-After %q with status %d", ra, rec.Code)
			}
			if !be.aborted || be.committed {
				t.Errorf("aborted %v, committed %v; want aborted", be.aborted, be.committed)
			}
		})
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// failingBackend stores nothing: its uploads fail with werr after some
// bytes.
type failingBackend struct {
	storage.Backend // nil: only Stat and Create are called
	werr            error
	after           int
	aborted         bool
	committed       bool
}

func (b *failingBackend) Stat(context.Context, string) (storage.FileInfo, error) {
	return storage.FileInfo{}, storage.ErrNotFound
}

func (b *failingBackend) Create(context.Context, string, storage.CreateOptions) (storage.Upload, error) {
	return &failingUpload{b: b}, nil
}

type failingUpload struct {
	b *failingBackend
	n int
}

func (u *failingUpload) Write(p []byte) (int, error) {
	if u.b.werr != nil && u.n+len(p) > u.b.after {
		k := max(u.b.after-u.n, 0)
		u.n += k
		return k, u.b.werr
	}
	u.n += len(p)
	return len(p), nil
}

func (u *failingUpload) Commit(context.Context) (storage.FileInfo, error) {
	u.b.committed = true
	return storage.FileInfo{}, errors.New("commit after a failure")
}

func (u *failingUpload) Abort() error { u.b.aborted = true; return nil }

package httpserve

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
)

// delete removes a file, or a directory with everything below it (WebDAV
// DELETE on a collection is recursive, RFC 4918 §9.6.1).
func (h *Handler) delete(w http.ResponseWriter, r *http.Request) error {
	t, err := h.open(r, auth.Delete)
	if err != nil {
		return err
	}
	if t.rel == "" {
		return Errorf(http.StatusForbidden, "%s is an export root and cannot be deleted", t.URLPath())
	}
	be := t.export.Backend
	fi, err := be.Stat(r.Context(), t.rel)
	if err != nil {
		return err
	}
	if fi.IsDir {
		if d := r.Header.Get("Depth"); d != "" && !strings.EqualFold(d, "infinity") {
			return Errorf(http.StatusBadRequest, "DELETE of a collection needs Depth: infinity")
		}
		ra, ok := be.(storage.RemoveAller)
		if !ok {
			err = be.Remove(r.Context(), t.rel)
		} else {
			err = ra.RemoveAll(r.Context(), t.rel)
		}
	} else {
		err = be.Remove(r.Context(), t.rel)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// mkcol creates one directory; its parent must exist (RFC 4918 §9.3.1).
func (h *Handler) mkcol(w http.ResponseWriter, r *http.Request) error {
	t, err := h.open(r, auth.Mkdir)
	if err != nil {
		return err
	}
	if r.ContentLength > 0 {
		return Errorf(http.StatusUnsupportedMediaType, "MKCOL with a body is not supported")
	}
	err = t.export.Backend.Mkdir(r.Context(), t.rel, false)
	switch {
	case errors.Is(err, storage.ErrExist):
		return Errorf(http.StatusMethodNotAllowed, "%s already exists", t.URLPath())
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrNotDir):
		return Errorf(http.StatusConflict, "%s: parent directory does not exist", t.URLPath())
	case err != nil:
		return err
	}
	w.Header().Set("Location", t.URLPath()+"/")
	w.WriteHeader(http.StatusCreated)
	return nil
}

// move renames within one export. The Destination may be an absolute URL
// (its host is not checked against ours: proxies rewrite it) or a path.
func (h *Handler) move(w http.ResponseWriter, r *http.Request) error {
	src, err := h.open(r, auth.Move)
	if err != nil {
		return err
	}
	if src.rel == "" {
		return Errorf(http.StatusForbidden, "%s is an export root and cannot be moved", src.URLPath())
	}
	d := r.Header.Get("Destination")
	if d == "" {
		return Errorf(http.StatusBadRequest, "MOVE needs a Destination header")
	}
	du, err := url.Parse(d)
	if err != nil {
		return Errorf(http.StatusBadRequest, "Destination %q: %v", d, err)
	}
	dst, err := h.resolve(du.Path)
	if err != nil {
		return err
	}
	if err := h.authorize(r.Context(), r, auth.Write, dst); err != nil {
		return err
	}
	if !dst.found {
		return errNoExport(dst)
	}
	if dst.export.Prefix != src.export.Prefix {
		return Errorf(http.StatusForbidden, "MOVE from %s to %s crosses exports; copy and delete instead", src.URLPath(), dst.URLPath())
	}
	overwrite := !strings.EqualFold(strings.TrimSpace(r.Header.Get("Overwrite")), "F")
	be := src.export.Backend
	_, statErr := be.Stat(r.Context(), dst.rel)
	existed := statErr == nil
	err = be.Rename(r.Context(), src.rel, dst.rel, overwrite)
	switch {
	case errors.Is(err, storage.ErrExist):
		return Errorf(http.StatusPreconditionFailed, "%s exists and Overwrite is F", dst.URLPath())
	case (errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrNotDir)) && existsErr(be.Stat(r.Context(), src.rel)):
		return Errorf(http.StatusConflict, "%s: parent is missing or not a directory", dst.URLPath())
	case err != nil:
		return err
	}
	if existed {
		w.WriteHeader(http.StatusNoContent)
	} else {
		w.Header().Set("Location", dst.URLPath())
		w.WriteHeader(http.StatusCreated)
	}
	return nil
}

func existsErr(_ storage.FileInfo, err error) bool { return err == nil }

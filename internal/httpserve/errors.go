package httpserve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/httprange"
	"github.com/wanda-fed/wanda/internal/storage"
)

// Error is an error with the HTTP status it should be answered with. The
// message is shown to the client; Err (if any) only in the log.
type Error struct {
	Status int
	Msg    string
	Err    error
	// Header is added to the answer (machine-readable detail).
	Header http.Header
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// digestMismatch is the answer to an upload whose bytes do not match the
// digest the client sent; the Wanda-Digest-Mismatch header names the
// algorithm so a client can tell corruption in transit (worth another
// try) from a bad request (docs/protocol.md).
func digestMismatch(path, alg string, want, got []byte, extra string) *Error {
	e := Errorf(http.StatusBadRequest, "%s: %s digest mismatch: client sent %s, received data has %s; nothing stored%s",
		path, alg, checksum.Hex(want), checksum.Hex(got), extra)
	e.Header = http.Header{"Wanda-Digest-Mismatch": {alg}}
	return e
}

// statusOf maps an error to a status and a message for the client. Errors
// from storage and auth carry their context in their text (operation, path);
// unknown errors answer 500 with a generic text and are logged in full.
func statusOf(err error) (int, string) {
	var he *Error
	if errors.As(err, &he) {
		return he.Status, he.Msg
	}
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return http.StatusUnauthorized, err.Error()
	case errors.Is(err, auth.ErrForbidden):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, storage.ErrEscapes):
		return http.StatusForbidden, "path escapes its export"
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrNotDir):
		// A path through a file ("/f/x") names nothing. Creating verbs
		// (PUT, MKCOL, MOVE's destination) answer 409 themselves.
		return http.StatusNotFound, err.Error()
	case errors.Is(err, storage.ErrNoSpace):
		// RFC 4918 §11.5: "unable to store the representation".
		return http.StatusInsufficientStorage, storage.Brief(err, storage.ErrNoSpace)
	case errors.Is(err, storage.ErrOverQuota):
		return http.StatusInsufficientStorage, storage.Brief(err, storage.ErrOverQuota)
	case errors.Is(err, storage.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, storage.Brief(err, storage.ErrTooLarge)
	case errors.Is(err, storage.ErrOverloaded):
		return http.StatusServiceUnavailable, storage.Brief(err, storage.ErrOverloaded)
	case errors.Is(err, storage.ErrBadPath):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, storage.ErrPermission), errors.Is(err, storage.ErrReadOnly):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, storage.ErrExist), errors.Is(err, storage.ErrIsDir),
		errors.Is(err, storage.ErrNotEmpty):
		return http.StatusConflict, err.Error()
	case errors.Is(err, storage.ErrShortWrite):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, httprange.ErrMalformed), errors.Is(err, httprange.ErrTooMany),
		errors.Is(err, httprange.ErrUnsatisfiable):
		return http.StatusRequestedRangeNotSatisfiable, err.Error()
	case errors.Is(err, storage.ErrUnsupported):
		return http.StatusNotImplemented, err.Error()
	case errors.Is(err, storage.ErrUpstreamTimeout):
		return http.StatusGatewayTimeout, err.Error()
	case errors.Is(err, storage.ErrUpstream):
		return http.StatusBadGateway, err.Error()
	case isCancel(err):
		return 499, "client closed request"
	}
	return http.StatusInternalServerError, "internal server error"
}

// writeError answers err. If the response has started there is nothing to
// say any more: the connection is aborted so the client sees a truncated
// transfer, never a short body that looks complete.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := statusOf(err)
	if rec, ok := w.(*recorder); ok {
		rec.err = err
		if rec.wroteHeader {
			panic(http.ErrAbortHandler)
		}
	}
	if status == 499 {
		// Nobody to answer; returning would let net/http send an
		// implicit "200 OK" to a client that may still be reading.
		panic(http.ErrAbortHandler)
	}
	hdr := w.Header()
	for _, k := range []string{"Content-Length", "Content-Range", "ETag", "Last-Modified", "Accept-Ranges", "Digest", "Repr-Digest"} {
		if k == "Content-Range" && status == http.StatusRequestedRangeNotSatisfiable {
			continue // "bytes */size" tells the client the size (RFC 9110 §15.5.17)
		}
		hdr.Del(k)
	}
	hdr.Set("X-Content-Type-Options", "nosniff")
	if errors.Is(err, storage.ErrOverloaded) {
		hdr.Set("Retry-After", "5") // clients retry the same server (client.Classify)
	}
	if c := auth.ChallengeOf(err); c != "" && (status == http.StatusUnauthorized || status == http.StatusForbidden) {
		hdr.Set("WWW-Authenticate", c)
	} else if status == http.StatusUnauthorized {
		hdr.Set("WWW-Authenticate", `Bearer realm="wanda"`)
	}
	var he *Error
	if errors.As(err, &he) {
		for k, v := range he.Header {
			hdr[k] = v
		}
	}
	if wantsJSON(r) {
		hdr.Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "error": msg})
		return
	}
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

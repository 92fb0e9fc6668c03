package xrdclient

import (
	"fmt"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Error is a kXR_error answer. It matches the engine's sentinel errors
// (errors.Is(err, client.ErrNotFound) for kXR_NotFound...) and says
// whether the same request may succeed later (Retryable), which is what
// the engine's Classify asks: a server in trouble is retried or failed
// over, a missing file is not.
type Error struct {
	Op   string // the request, e.g. "kXR_open"
	URL  string // redacted
	Code xrootd.ErrorCode
	Msg  string
}

func (e *Error) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("%v: %s", e.Code, e.Msg)
	}
	return fmt.Sprintf("%s %s: %v: %s", e.Op, e.URL, e.Code, e.Msg)
}

// Is maps error codes to the engine's sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case client.ErrNotFound:
		return e.Code == xrootd.CodeNotFound
	case client.ErrForbidden:
		return e.Code == xrootd.CodeNotAuthorized || e.Code == xrootd.CodeFSReadOnly
	case client.ErrUnauthorized:
		return e.Code == xrootd.CodeAuthFailed
	case client.ErrExist:
		return e.Code == xrootd.CodeItExists
	case client.ErrIsDir:
		return e.Code == xrootd.CodeIsDirectory
	case client.ErrChecksum:
		return e.Code == xrootd.CodeChkSumErr
	}
	return false
}

// Retryable reports whether the same request may succeed later, here or
// on another replica: the server's own trouble (I/O, memory, overload, no
// data server available yet, a file locked by a writer, a timeout), not
// the request's.
func (e *Error) Retryable() bool {
	switch e.Code {
	case xrootd.CodeServerError, xrootd.CodeIOError, xrootd.CodeFSError, xrootd.CodeNoMemory,
		xrootd.CodeNoServer, xrootd.CodeOverloaded, xrootd.CodeFileLocked, xrootd.CodeInProgress,
		xrootd.CodeReqTimedOut, xrootd.CodeTimerExpired, xrootd.CodeCancelled:
		return true
	}
	return false
}

// errAuthProtocol: the server wants an authentication protocol this
// client does not speak.
var errAuthProtocol = fmt.Errorf("no common authentication protocol: %w", client.ErrUnauthorized)

// authRefused is a kXR_auth the server refused: the credential was not
// accepted, whatever the code says (XRootD answers kXR_AuthFailed, wanda
// kXR_NotAuthorized), so it matches client.ErrUnauthorized as well as
// what the answer itself matches.
type authRefused struct{ err error }

func (e authRefused) Error() string   { return e.err.Error() }
func (e authRefused) Unwrap() []error { return []error{e.err, client.ErrUnauthorized} }

// annotate fills in the request and URL of a kXR_error answer, and turns
// a kXR_redirect into the engine's *client.RedirectError.
func annotate(err error, op string, u *urlInfo) error {
	switch e := err.(type) {
	case *Error:
		e.Op, e.URL = op, client.Redact(u.u)
		return e
	case *redirect:
		loc, lerr := redirectURL(u.u, e.RedirectResponse)
		if lerr != nil {
			return fmt.Errorf("%s %s: %w", op, client.Redact(u.u), lerr)
		}
		return &client.RedirectError{From: u.u, Location: loc}
	case nil:
		return nil
	}
	return fmt.Errorf("%s %s: %w", op, client.Redact(u.u), err)
}

package server

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Error is a protocol error with the kXR_error code it is answered with.
// Msg is shown to the client; Err (if any) only goes to the log.
type Error struct {
	Code xrootd.ErrorCode
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code.String() + ": " + e.Msg + ": " + e.Err.Error()
	}
	return e.Code.String() + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// errorf builds an *Error.
func errorf(code xrootd.ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// codeOf maps an error to the code and message the client gets, as the
// HTTP front-end maps the same sentinels to status codes: errors from
// storage and auth carry their context in their text; unknown errors are
// kXR_ServerError with a generic text (and logged in full by the caller).
func codeOf(err error) (xrootd.ErrorCode, string) {
	var xe *Error
	if errors.As(err, &xe) {
		return xe.Code, xe.Msg
	}
	switch {
	case errors.Is(err, auth.ErrUnauthenticated), errors.Is(err, auth.ErrForbidden):
		return xrootd.CodeNotAuthorized, err.Error()
	case errors.Is(err, storage.ErrEscapes):
		return xrootd.CodeNotAuthorized, "path escapes its export"
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrNotDir):
		// A path through a file ("/f/x") names nothing.
		return xrootd.CodeNotFound, err.Error()
	case errors.Is(err, storage.ErrNameTooLong):
		return xrootd.CodeArgTooLong, err.Error() // XProtocol's ENAMETOOLONG
	case errors.Is(err, storage.ErrBadPath):
		return xrootd.CodeArgInvalid, err.Error()
	case errors.Is(err, storage.ErrNoSpace):
		return xrootd.CodeNoSpace, storage.Brief(err, storage.ErrNoSpace)
	case errors.Is(err, storage.ErrOverQuota):
		return xrootd.CodeOverQuota, storage.Brief(err, storage.ErrOverQuota)
	case errors.Is(err, storage.ErrTooLarge):
		return xrootd.CodeIOError, storage.Brief(err, storage.ErrTooLarge)
	case errors.Is(err, storage.ErrOverloaded), errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return xrootd.CodeOverloaded, "server out of file descriptors or memory, try again later"
	case errors.Is(err, storage.ErrPermission):
		return xrootd.CodeNotAuthorized, err.Error()
	case errors.Is(err, storage.ErrReadOnly):
		return xrootd.CodeFSReadOnly, err.Error()
	case errors.Is(err, storage.ErrIsDir):
		return xrootd.CodeIsDirectory, err.Error()
	case errors.Is(err, storage.ErrExist), errors.Is(err, storage.ErrNotEmpty):
		// XRootD answers a non-empty directory with kXR_ItExists too
		// (XProtocol::mapError's ENOTEMPTY).
		return xrootd.CodeItExists, err.Error()
	case errors.Is(err, storage.ErrShortWrite):
		return xrootd.CodeIOError, err.Error()
	case errors.Is(err, storage.ErrUnsupported):
		return xrootd.CodeUnsupported, err.Error()
	case errors.Is(err, storage.ErrUpstreamTimeout):
		return xrootd.CodeReqTimedOut, err.Error()
	case errors.Is(err, storage.ErrUpstream):
		return xrootd.CodeServerError, err.Error()
	case errors.Is(err, syscall.ENOSPC):
		return xrootd.CodeNoSpace, "no space left on device"
	case errors.Is(err, syscall.EDQUOT):
		return xrootd.CodeOverQuota, "disk quota exceeded"
	case errors.Is(err, syscall.EIO):
		return xrootd.CodeIOError, "I/O error"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return xrootd.CodeCancelled, "request cancelled"
	}
	return xrootd.CodeServerError, "internal server error"
}

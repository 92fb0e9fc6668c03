package tpc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

// Reason is the stable words that start a failed copy's message (the
// "failure:" line of the marker stream), so that a tool (gfal2, FTS,
// wanda's transfer service) can classify it without parsing the rest.
// The remote's answers are "remote NNN" (its HTTP status, or the status
// an XRootD error amounts to).
func Reason(err error) string {
	var se *client.StatusError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNotAllowed), errors.Is(err, ErrBadRemote):
		return "remote not allowed"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, client.ErrChecksum):
		return "checksum mismatch"
	case errors.Is(err, storage.ErrExist):
		return "destination exists"
	case errors.Is(err, storage.ErrNoSpace), errors.Is(err, storage.ErrOverQuota), errors.Is(err, storage.ErrTooLarge):
		return "no space"
	case errors.Is(err, client.ErrSourceChanged):
		return "source changed"
	case errors.Is(err, client.ErrStalled), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &se):
		if se.Code == 412 && se.Method != "GET" && se.Method != "HEAD" {
			return "destination exists"
		}
		if se.Code == 507 {
			return "no space"
		}
		return fmt.Sprintf("remote %d", se.Code)
	case errors.Is(err, client.ErrNotFound):
		return "remote 404"
	case errors.Is(err, client.ErrForbidden):
		return "remote 403"
	case errors.Is(err, client.ErrUnauthorized):
		return "remote 401"
	case errors.Is(err, client.ErrExist):
		return "destination exists"
	case errors.Is(err, client.ErrIsDir), errors.Is(err, storage.ErrIsDir):
		return "is a directory"
	case errors.Is(err, storage.ErrPermission), errors.Is(err, storage.ErrReadOnly):
		return "permission denied"
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no such host") {
		return "network error"
	}
	return "error"
}

// Message is the whole failure text: the reason, then the details.
func Message(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ") // one line
	return Reason(err) + ": " + msg
}

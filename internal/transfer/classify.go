package transfer

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/tpc"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Error classes: the stable words an attempt's failure is filed under
// (API, metrics, the CLI). Only Retryable ones are tried again.
const (
	ClassSourceMissing = "source missing"
	ClassPermission    = "permission"
	ClassChecksum      = "checksum mismatch"
	ClassExists        = "destination exists"
	ClassTimeout       = "timeout"
	ClassNetwork       = "network"
	ClassNoSpace       = "no space"
	ClassCanceled      = store.ClassCanceled // the store records these two itself
	ClassLeaseExpired  = store.ClassLeaseExpired
	ClassOther         = "error"
)

// Classify files an attempt's error under a class.
func Classify(err error) string {
	var te *client.TPCError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.As(err, &te) && strings.HasPrefix(te.Reason(), "no space"):
		return ClassNoSpace
	case errors.Is(err, client.ErrChecksum):
		return ClassChecksum
	case errors.Is(err, client.ErrExist):
		return ClassExists
	case errors.Is(err, client.ErrNotFound):
		return ClassSourceMissing
	case errors.Is(err, client.ErrForbidden), errors.Is(err, client.ErrUnauthorized), errors.Is(err, tpc.ErrNotAllowed):
		return ClassPermission
	case errors.Is(err, client.ErrStalled), errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	}
	var se *client.StatusError
	if errors.As(err, &se) {
		switch {
		case se.Code == 507 || se.Code == 413:
			return ClassNoSpace
		case se.Code >= 500 || se.Code == 408 || se.Code == 429:
			return ClassNetwork
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return ClassTimeout
		}
		return ClassNetwork
	}
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "no space") || strings.Contains(msg, "quota"):
		return ClassNoSpace
	case strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "no such host") || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "eof"):
		return ClassNetwork
	case strings.Contains(msg, "timeout") || strings.Contains(msg, "timed out"):
		return ClassTimeout
	}
	return ClassOther
}

// Retryable reports whether a class may succeed on another attempt.
func Retryable(class string) bool {
	switch class {
	case ClassChecksum, ClassTimeout, ClassNetwork, ClassLeaseExpired, ClassOther:
		return true
	}
	return false
}

// sourceSide reports whether a class is about the source, so that the
// next alternative source is worth trying at once.
func sourceSide(class string) bool {
	switch class {
	case ClassSourceMissing, ClassPermission, ClassNetwork, ClassTimeout:
		return true
	}
	return false
}

// destSide reports whether a class is about the destination, so that
// another source would not help.
func destSide(class string) bool {
	return class == ClassExists || class == ClassNoSpace
}

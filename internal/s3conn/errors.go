package s3conn

import (
	"net/http"

	"github.com/minio/minio-go/v7"
)

// Kind is what an S3 error answer means, the same for the export's
// backend and for the s3:// client, which each turn it into their own
// errors.
type Kind int

const (
	Other      Kind = iota
	NotFound        // no such key, bucket or upload
	Denied          // access denied, a wrong key or signature
	Conflict        // a precondition (If-Match) failed
	TooLarge        // the entity is too large
	NoSpace         // the server's storage is full
	Overloaded      // slow down, unavailable: try again later
	Timeout         // the server timed out waiting for the request
	BadName         // the key is not a valid name
)

// Classify tells what an S3 error answer means: by its code, else by its
// HTTP status (answers to HEAD have no body, so no code).
func Classify(er minio.ErrorResponse) Kind {
	switch er.Code {
	case "NoSuchKey", "NoSuchBucket", "NoSuchUpload", "NotFound":
		return NotFound
	case "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return Denied
	case "PreconditionFailed":
		return Conflict
	case "EntityTooLarge":
		return TooLarge
	case "XMinioStorageFull":
		return NoSpace
	case "SlowDown", "ServiceUnavailable", "XMinioServerNotInitialized":
		return Overloaded
	case "RequestTimeout":
		return Timeout
	case "XMinioInvalidObjectName", "InvalidObjectName", "KeyTooLongError":
		return BadName
	}
	switch er.StatusCode {
	case http.StatusNotFound:
		return NotFound
	case http.StatusForbidden:
		return Denied
	case http.StatusPreconditionFailed:
		return Conflict
	case http.StatusServiceUnavailable:
		return Overloaded
	}
	return Other
}

// Package monitor is wanda's per-access records: one Record per file
// access (open to close, one HTTP request on a file) and per transfer,
// written by every front-end through the small Sink interface, and a
// Recorder that queues them (a bounded channel: the data path never
// waits) for one writer goroutine, which writes JSON lines to a rotating
// file (rotate.go) and hands them to an optional HTTP collector
// (collector.go). Records that do not fit are dropped and counted
// (wanda_records_dropped_total), never silently.
//
// Streams (stream.go) see the same accesses as they happen — an open,
// a close, a client's session (a root:// login, an HTTP connection) and
// its end —: XRootD's UDP monitoring streams (package xrdstream) are one.
//
// A front-end starts an Access (Sink.Start), counts its reads, vector
// reads and writes on it (atomic counters in the Access: no allocation
// per read) and ends it once (Access.End). Long accesses are also
// reported by progress records while they run.
package monitor

import (
	"strings"
	"time"
)

// Record types.
const (
	TypeAccess   = "access"   // a file access or request, at its end
	TypeProgress = "progress" // an access still running
	TypeTransfer = "transfer" // one attempt of a transfer service file
)

// Results.
const (
	ResultOK       = "ok"
	ResultError    = "error"
	ResultActive   = "active"   // a progress record
	ResultRedirect = "redirect" // a redirector sent the client on
)

// Error classes: a bounded set, shared by the protocols.
const (
	ClassNotFound    = "not_found"
	ClassAuth        = "unauthenticated"
	ClassForbidden   = "forbidden"
	ClassClient      = "client_error"  // a request the server cannot take
	ClassConflict    = "conflict"      // exists, precondition, locked
	ClassAbort       = "client_abort"  // the client went away
	ClassTimeout     = "timeout"       //
	ClassUnavailable = "unavailable"   // overloaded, no replica answered
	ClassNoSpace     = "no_space"      //
	ClassIO          = "io_error"      // the storage failed
	ClassServer      = "server_error"  // anything else on the server's side
	ClassClosed      = "session_ended" // a root:// file never closed
)

// Record is one line of the records file: what one access (or transfer
// attempt) did. Bytes are seen from the client: BytesRead is what the
// server sent it, BytesWritten what it stored for it. Size is the file's
// size (-1: unknown). Path is the logical path, never with a query.
type Record struct {
	Type     string    `json:"type"`
	ID       uint64    `json:"id"` // the access's, shared by its progress records
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Duration float64   `json:"duration_s"`
	Role     string    `json:"role"`
	Server   string    `json:"server,omitempty"`
	Site     string    `json:"site,omitempty"`
	Protocol string    `json:"protocol"`
	Op       string    `json:"op"`
	Client   string    `json:"client,omitempty"`
	User     string    `json:"user"`
	Path     string    `json:"path"`
	Size     int64     `json:"size"`

	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
	Reads        int64 `json:"reads"`
	ReadBytes    int64 `json:"read_bytes"`
	Readvs       int64 `json:"readvs"`
	ReadvSegs    int64 `json:"readv_segments"`
	ReadvBytes   int64 `json:"readv_bytes"`
	Writes       int64 `json:"writes"`
	WriteBytes   int64 `json:"write_bytes"`

	Result     string `json:"result"`
	ErrorClass string `json:"error_class,omitempty"`
	// Status is the protocol's answer: the HTTP status, the kXR error
	// code of a failed root:// request.
	Status int `json:"status,omitempty"`

	// Redirect is where a redirector sent the client (no query).
	Redirect string `json:"redirect,omitempty"`
	// Chain is the redirectors that led here, when the client told.
	Chain []string `json:"chain,omitempty"`

	CacheHitBytes  int64 `json:"cache_hit_bytes,omitempty"`
	CacheMissBytes int64 `json:"cache_miss_bytes,omitempty"`

	// Source and Destination of a transfer (credentials removed).
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
	Mode        string `json:"mode,omitempty"` // transfer: tpc, streamed, skipped
}

// Anonymous is the user of an access without a verified credential.
const Anonymous = "anonymous"

// cleanPath drops a query (tokens travel as authz=...) from a path.
func cleanPath(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// HTTPClass is the error class of an HTTP status ("" below 400).
func HTTPClass(status int) string {
	switch {
	case status < 400:
		return ""
	case status == 401:
		return ClassAuth
	case status == 403:
		return ClassForbidden
	case status == 404 || status == 410:
		return ClassNotFound
	case status == 409 || status == 412 || status == 423:
		return ClassConflict
	case status == 499:
		return ClassAbort
	case status == 408 || status == 504:
		return ClassTimeout
	case status == 503 || status == 429:
		return ClassUnavailable
	case status == 507 || status == 413:
		return ClassNoSpace
	case status < 500:
		return ClassClient
	}
	return ClassServer
}

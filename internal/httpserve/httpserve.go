// Package httpserve is the HTTP/WebDAV front-end: it parses requests, asks
// the auth.Authorizer, calls a storage.Backend through a storage.Namespace,
// and maps errors to status codes in one place (errors.go). It knows nothing
// of disks, caches or redirectors, so a server, a cache and (later) a
// redirector are this same front-end over different cores.
//
// Data is sent zero-copy where the kernel allows: a whole file, a single
// range and each large part of a multi-range answer go out with sendfile(2)
// via io.Copy from the *os.File to the connection.
package httpserve

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/tpc"
)

// Options configure a Handler. Zero values take the defaults in
// config.HTTP.
type Options struct {
	Namespace *storage.Namespace
	Auth      auth.Authorizer
	Log       *slog.Logger
	Metrics   *metrics.HTTP
	// MaxRanges bounds the ranges of one request (416 beyond).
	MaxRanges int
	// MakeParents lets PUT create missing parent directories.
	MakeParents bool
	// Checksums lists algorithms answered to Want-Digest; nil means
	// every algorithm the checksum package knows.
	Checksums []string
	// ParallelPutIdleTimeout discards a parallel upload (putparts.go) that
	// received no part for this long (default 10 minutes).
	ParallelPutIdleTimeout time.Duration
	// Buffers is the budget that multi-range answers and upload copies
	// take their buffers from (shared with root:// in a wanda process);
	// nil: a budget of bufpool.DefaultLimit for this handler alone.
	Buffers *bufpool.Pool
	// MaxParallelPuts bounds the parallel uploads in progress; parts that
	// would start one more get 503 (default 1024).
	MaxParallelPuts int
	// TPC runs third-party copies (COPY, copy.go); nil refuses them.
	TPC *tpc.Copier
	// TPCMarkerInterval is the time between perf markers (default 5 s).
	TPCMarkerInterval time.Duration
}

// Handler serves the data namespace. Build it with New.
type Handler struct {
	opts  Options
	log   *slog.Logger
	parts *partSessions
}

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxRanges == 0 {
		opts.MaxRanges = 4096
	}
	if opts.Auth == nil {
		opts.Auth = auth.ExportPolicy{}
	}
	if opts.Buffers == nil {
		opts.Buffers = bufpool.New(bufpool.DefaultLimit)
	}
	if opts.ParallelPutIdleTimeout <= 0 {
		opts.ParallelPutIdleTimeout = defaultPartIdle
	}
	if opts.TPCMarkerInterval <= 0 {
		opts.TPCMarkerInterval = 5 * time.Second
	}
	if opts.MaxParallelPuts <= 0 {
		opts.MaxParallelPuts = defaultMaxPartSessions
	}
	return &Handler{opts: opts, log: opts.Log, parts: newPartSessions(opts.ParallelPutIdleTimeout, opts.MaxParallelPuts, opts.Log)}
}

// ServeHTTP dispatches by method; every handler returns an error that
// writeError turns into the answer.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := w.(*recorder); !ok {
		w = &recorder{ResponseWriter: w, status: http.StatusOK}
	}
	var err error
	var body *bodyState
	if r.Method == http.MethodPut {
		// A shallow copy, as in Middleware: net/http looks at its own
		// request's Body after the handler returns.
		body = &bodyState{ReadCloser: r.Body}
		r2 := new(http.Request)
		*r2 = *r
		r2.Body = body
		r = r2
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		err = h.get(w, r)
	case http.MethodPut:
		err = h.put(w, r)
	case http.MethodDelete:
		err = h.delete(w, r)
	case "MKCOL":
		err = h.mkcol(w, r)
	case "MOVE":
		err = h.move(w, r)
	case "COPY":
		err = h.copy(w, r)
	case "PROPFIND":
		err = h.propfind(w, r)
	case http.MethodOptions:
		err = h.options(w, r)
	default:
		w.Header().Set("Allow", allowed)
		err = Errorf(http.StatusMethodNotAllowed, "method %s not supported", r.Method)
	}
	if err != nil {
		h.writeError(w, r, err)
		if body != nil && body.midway() {
			linger(w, body)
		}
	}
}

const allowed = "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, COPY, PROPFIND"

func (h *Handler) options(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Allow", allowed)
	w.Header().Set("DAV", "1")
	w.Header().Set("Accept-Ranges", "bytes")
	if h.parallelPut(r.URL.Path) {
		w.Header().Set(hdrParallelPut, "1")
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// target is a request path resolved to an export.
type target struct {
	logical string // cleaned, no leading slash
	export  storage.Export
	rel     string
	found   bool // an export covers it
	// createOnly: the credential may create this file but not replace
	// it (WLCG storage.create); uploads are made exclusive.
	createOnly error
}

// URLPath is the logical path as a URL path ("/store/a").
func (t target) URLPath() string { return "/" + t.logical }

// resolve cleans a request path and finds its export. A path with ".."
// segments is refused (403), never resolved.
func (h *Handler) resolve(p string) (target, error) {
	clean, err := storage.CleanPath(p)
	if err != nil {
		return target{}, err
	}
	e, rel, ok := h.opts.Namespace.Resolve(clean)
	return target{logical: clean, export: e, rel: rel, found: ok}, nil
}

// open resolves, authorizes and requires an export.
func (h *Handler) open(r *http.Request, op auth.Op) (target, error) {
	t, err := h.resolve(r.URL.Path)
	if err != nil {
		return t, err
	}
	if err := h.authorize(r.Context(), r, op, t); err != nil {
		return t, err
	}
	if !t.found {
		return t, errNoExport(t)
	}
	return t, nil
}

// openWrite is open for an upload: a credential that may only create new
// files (auth.ErrCreateOnly) is let through with t.createOnly set, and the
// upload is made exclusive (storage.CreateOptions.NoReplace).
func (h *Handler) openWrite(r *http.Request) (target, error) {
	t, err := h.resolve(r.URL.Path)
	if err != nil {
		return t, err
	}
	if err := h.authorize(r.Context(), r, auth.Write, t); err != nil {
		if !errors.Is(err, auth.ErrCreateOnly) {
			return t, err
		}
		t.createOnly = err
	}
	if !t.found {
		return t, errNoExport(t)
	}
	return t, nil
}

// noReplace reports whether an upload to t must not replace a file: the
// client asked (Overwrite: F, If-None-Match: *) or its credential may
// only create.
func (t target) noReplace(r *http.Request) bool {
	return t.createOnly != nil || noReplaceAsked(r)
}

// existsErr is the answer to an exclusive upload whose target exists.
func (t target) existsErr(meanwhile bool) error {
	if t.createOnly != nil {
		return t.createOnly // 403: the credential cannot replace files
	}
	if meanwhile {
		return Errorf(http.StatusPreconditionFailed, "%s was created meanwhile and the request forbids replacing it", t.URLPath())
	}
	return Errorf(http.StatusPreconditionFailed, "%s exists and the request forbids replacing it", t.URLPath())
}

func errNoExport(t target) error {
	return Errorf(http.StatusNotFound, "%s: no export covers this path", t.URLPath())
}

// isCancel reports a client that went away.
func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// wantsJSON reports whether the client prefers JSON.
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

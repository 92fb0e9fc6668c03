package httpserve

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
)

// recorder captures status and byte counts. It forwards ReadFrom so that
// io.Copy from an *os.File still reaches sendfile(2) underneath.
type recorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	n           atomic.Int64 // body bytes sent (read by progress records)
	err         error
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader && code >= 200 {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	n, err := r.ResponseWriter.Write(p)
	r.n.Add(int64(n))
	return n, err
}

func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	var n int64
	var err error
	if rf, ok := r.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		// HTTP/2 and httptest.ResponseRecorder have no ReadFrom.
		n, err = io.Copy(r.ResponseWriter, src)
	}
	r.n.Add(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// countingBody counts request body bytes.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Middleware wraps next with request id -> access log -> metrics, the
// order STYLE.md gives (auth is inside the handler, per operation).
func Middleware(next http.Handler, log *slog.Logger, m *metrics.HTTP) http.Handler {
	return MiddlewareWithRecords(next, log, m, Records{})
}

// Records configure the per-request records of MiddlewareWithRecords.
type Records struct {
	// Sink takes a record of every request on a file (nil: none).
	Sink monitor.Sink
	// Skip exempts requests that are not file accesses (APIs).
	Skip func(r *http.Request) bool
	// Routine says which requests are the federation's own traffic
	// (heartbeats, lookups between redirectors, digests, the topology):
	// answered below 400 they are logged at debug level, not info — a
	// redirector of a thousand members would write two hundred heartbeat
	// lines a second otherwise. Failures are logged as any request's.
	Routine func(r *http.Request) bool
	// Sessions gives the records of one connection a monitoring session
	// (nil: none); the http.Server must use its ConnContext and
	// ConnState.
	Sessions *Sessions
}

// MiddlewareWithRecords is Middleware that also writes a record of each
// request on a file (records.go) through rs.Sink.
func MiddlewareWithRecords(next http.Handler, log *slog.Logger, m *metrics.HTTP, rs Records) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !saneID(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		body := &countingBody{ReadCloser: r.Body}
		// The handler gets a shallow copy: after it returns, net/http looks
		// at the concrete type of its own request's Body to learn whether
		// "100 Continue" was sent and how much body is left. Replacing it
		// there made a refused "Expect: 100-continue" upload wait for a
		// body the client never sends.
		ctx := r.Context()
		acc := startRecord(rs, r)
		if acc != nil {
			ctx = monitor.NewContext(auth.WithIdentitySink(ctx, acc), acc)
			// Progress records of a long request: its bytes so far.
			acc.Live(func() (int64, int64) { return rec.n.Load(), body.n.Load() })
		}
		r = r.WithContext(ctx) // a shallow copy
		r.Body = body
		if m != nil {
			m.InFlight.Inc()
		}
		defer func() {
			p := recover()
			d := time.Since(start)
			status := rec.status
			switch {
			case p == http.ErrAbortHandler:
				status = 499 // aborted mid-answer
			case p != nil:
				status = http.StatusInternalServerError // a bug: count and log it as one
				rec.err = fmt.Errorf("panic: %v", p)
			}
			if m != nil {
				m.InFlight.Dec()
				method := metricMethod(r.Method)
				m.Requests.WithLabelValues(method, strconv.Itoa(status)).Inc()
				m.Duration.WithLabelValues(method).Observe(d.Seconds())
				m.BytesOut.Add(float64(rec.n.Load()))
				m.BytesIn.Add(float64(body.n.Load()))
			}
			level := slog.LevelInfo
			switch {
			case status >= 500:
				level = slog.LevelError
			case status < 400 && rs.Routine != nil && rs.Routine(r):
				level = slog.LevelDebug
			}
			// A record says all the access line would (and more): the
			// access is not written twice. Errors are logged either way,
			// and both are written at debug level. (A record that only
			// feeds the monitoring streams is no record: the line is
			// written.)
			recorded := acc.Recorded() && level == slog.LevelInfo && !log.Enabled(r.Context(), slog.LevelDebug)
			if recorded || !log.Enabled(r.Context(), level) {
				endRecord(acc, r, w.Header(), status, rec.n.Load(), body.n.Load())
				if p != nil {
					panic(p)
				}
				return
			}
			attrs := []slog.Attr{
				slog.String("id", id), slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Int64("out", rec.n.Load()), slog.Int64("in", body.n.Load()),
				slog.Duration("dur", d), slog.String("peer", r.RemoteAddr),
			}
			if ua := r.UserAgent(); ua != "" {
				attrs = append(attrs, slog.String("ua", ua))
			}
			if rec.err != nil {
				attrs = append(attrs, slog.String("err", rec.err.Error()))
			}
			log.LogAttrs(r.Context(), level, "request", attrs...)
			endRecord(acc, r, w.Header(), status, rec.n.Load(), body.n.Load())
			if p != nil {
				panic(p)
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// metricMethod bounds the method label: any token is a valid method, and
// a client sending made-up ones must not create a time series for each.
func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions,
		http.MethodPost, "MKCOL", "MOVE", "COPY", "PROPFIND", "PROPPATCH":
		return m
	}
	return "other"
}

func saneID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

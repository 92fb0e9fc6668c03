package httpserve_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmontest"
	"github.com/wanda-fed/wanda/internal/monitor/xrdstream"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// recordsServer serves a 4 KiB file at /store/f4k: with records to a
// file ("on"), with XRootD's monitoring stream to a local collector
// ("stream", its default settings), or with neither ("off").
func recordsServer(b *testing.B, mode string) *recordsBench {
	b.Helper()
	dir := b.TempDir()
	mustWrite(b, filepath.Join(dir, "f4k"), randBytes(3, 4096))
	be, err := posix.New(dir, posix.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	ns, err := storage.NewNamespace(storage.Export{Prefix: "/store", Backend: be})
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.NewHTTP(prometheus.NewRegistry(), "server")
	var rs httpserve.Records
	if mode == "stream" {
		col := xrdmontest.Listen(b)
		st, err := xrdstream.New(xrdstream.Options{Dests: []string{col.Addr()}, FStat: true, User: true, Info: true, Redir: true,
			Auth: true, FStatInterval: time.Minute, LFN: true, Ops: true, Xfr: 5, Identity: xrdstream.Identity{Host: "bench", Port: 1}})
		if err != nil {
			b.Fatal(err)
		}
		st.Start("", 0)
		rec, err := monitor.New(monitor.Options{Role: "server", Streams: []monitor.Stream{st}, Progress: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rec.Close() })
		rs.Sink, rs.Sessions = rec, httpserve.NewSessions(rec)
	}
	if mode == "on" {
		rec, err := monitor.New(monitor.Options{Role: "server", File: monitor.FileOptions{Path: filepath.Join(b.TempDir(), "records.jsonl")},
			Metrics: metrics.NewRecords(prometheus.NewRegistry(), "server")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rec.Close() })
		rs.Sink = rec
	}
	s := &recordsBench{server: &server{}}
	s.handler = httpserve.MiddlewareWithRecords(httpserve.New(httpserve.Options{Namespace: ns, Metrics: m}), slog.New(slog.DiscardHandler), m, rs)
	s.serve(b, s.handler, rs.Sessions.Wrap)
	return s
}

// recordsBench is a test server and its handler.
type recordsBench struct {
	*server
	handler http.Handler
}

// BenchmarkGet4KiBRecords: 4 KiB GETs over loopback, 8 clients at once,
// records off and on, and XRootD's stream on (the issues' bound: under
// 1% of requests/s).
func BenchmarkGet4KiBRecords(b *testing.B) {
	for _, mode := range []string{"off", "on", "stream"} {
		b.Run(mode, func(b *testing.B) {
			s := recordsServer(b, mode)
			req, _ := http.NewRequest(http.MethodGet, s.URL+"/store/f4k", nil)
			benchGet(b, s.server, req, http.StatusOK, 4096)
			b.SetBytes(4096)
			b.ReportAllocs()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchGet(b, s.server, req, http.StatusOK, 4096)
				}
			})
		})
	}
}

// BenchmarkHandler4KiBRecords: the same GET through the handler alone (no
// network), so the records' own cost per request shows: the difference
// between off and on.
func BenchmarkHandler4KiBRecords(b *testing.B) {
	for _, mode := range []string{"off", "on", "stream"} {
		b.Run(mode, func(b *testing.B) {
			s := recordsServer(b, mode)
			h := s.handler
			req := httptest.NewRequest(http.MethodGet, "/store/f4k", nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK || w.Body.Len() != 4096 {
					b.Fatalf("status %d, %d bytes", w.Code, w.Body.Len())
				}
			}
		})
	}
}

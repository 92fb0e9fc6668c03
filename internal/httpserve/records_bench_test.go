package httpserve_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/httpserve"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// recordsServer serves a 4 KiB file at /store/f4k, with records to a
// file when on.
func recordsServer(b *testing.B, on bool) *recordsBench {
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
	if on {
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
	s.serve(b, s.handler)
	return s
}

// recordsBench is a test server and its handler.
type recordsBench struct {
	*server
	handler http.Handler
}

// BenchmarkGet4KiBRecords: 4 KiB GETs over loopback, 8 clients at once,
// records off and on (the bound: under 1% of requests/s).
func BenchmarkGet4KiBRecords(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			s := recordsServer(b, on)
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
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			s := recordsServer(b, on)
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

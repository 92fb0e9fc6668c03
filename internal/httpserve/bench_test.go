package httpserve_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchFile writes a size-byte file into the read-only export.
func benchFile(b *testing.B, s *server, name string, size int) {
	b.Helper()
	f, err := os.Create(filepath.Join(s.Store, name))
	if err != nil {
		b.Fatal(err)
	}
	chunk := randBytes(5, 1<<20)
	for off := 0; off < size; off += len(chunk) {
		if _, err := f.Write(chunk[:min(len(chunk), size-off)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// benchGet runs one GET and checks status and body size.
func benchGet(b *testing.B, s *server, req *http.Request, status int, want int64) {
	resp, err := s.Client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != status || n != want {
		b.Fatalf("status %d, %d bytes (want %d, %d): %v", resp.StatusCode, n, status, want, err)
	}
}

// BenchmarkGetWhole: whole-file GETs of 64 MiB over loopback (sendfile).
func BenchmarkGetWhole(b *testing.B) {
	const size = 64 << 20
	s := newServer(b)
	benchFile(b, s, "bench.bin", size)
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/store/bench.bin", nil)
	benchGet(b, s, req, http.StatusOK, size) // warm the page cache
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		benchGet(b, s, req, http.StatusOK, size)
	}
}

// BenchmarkMultiRange1000x4K: one request for 1000 ranges of 4 KiB spread
// over a 64 MiB file, as a ROOT vector read sends; bytes are the payload.
func BenchmarkMultiRange1000x4K(b *testing.B) {
	const size, count, part = 64 << 20, 1000, 4 << 10
	s := newServer(b)
	benchFile(b, s, "bench.bin", size)
	var rng strings.Builder
	rng.WriteString("bytes=")
	stride := size / count
	for i := range count {
		if i > 0 {
			rng.WriteString(",")
		}
		start := i*stride + (i*7919)%(stride-part)
		fmt.Fprintf(&rng, "%d-%d", start, start+part-1)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/store/bench.bin", nil)
	req.Header.Set("Range", rng.String())
	resp, err := s.Client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		b.Fatalf("status %d", resp.StatusCode)
	}
	total := int64(len(body))
	b.SetBytes(count * part)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		benchGet(b, s, req, http.StatusPartialContent, total)
	}
}

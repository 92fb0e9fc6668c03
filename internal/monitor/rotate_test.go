package monitor

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRotateBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "records.jsonl")
	rt, err := openRotator(FileOptions{Path: path, MaxSize: 100, MaxFiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 39) + "\n") // 40 bytes: two fit
	now := time.Now()
	for i := range 20 {
		if err := rt.write(line, now.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.close(); err != nil {
		t.Fatal(err)
	}
	rot := rt.rotated()
	if len(rot) != 3 {
		t.Fatalf("kept %d rotated files, want 3: %v", len(rot), rot)
	}
	for _, p := range append(rot, path) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 100 || len(b)%40 != 0 {
			t.Errorf("%s: %d bytes: past the size limit or a split line", p, len(b))
		}
	}
	// Files that are not rotations are left alone.
	other := path + ".bak"
	if err := os.WriteFile(other, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt.prune()
	if _, err := os.Stat(other); err != nil {
		t.Errorf("prune removed a file not its own: %v", err)
	}
}

func TestRotateByAge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	rt, err := openRotator(FileOptions{Path: path, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_ = rt.write([]byte("{\"a\":1}\n"), t0)
	_ = rt.write([]byte("{\"a\":2}\n"), t0.Add(30*time.Minute))
	if len(rt.rotated()) != 0 {
		t.Fatal("rotated before max_age")
	}
	_ = rt.write([]byte("{\"a\":3}\n"), t0.Add(61*time.Minute))
	_ = rt.close()
	rot := rt.rotated()
	if len(rot) != 1 {
		t.Fatalf("rotated files %v, want one", rot)
	}
	old, _ := os.ReadFile(rot[0])
	cur, _ := os.ReadFile(path)
	if string(old) != "{\"a\":1}\n{\"a\":2}\n" || string(cur) != "{\"a\":3}\n" {
		t.Errorf("rotated %q, current %q", old, cur)
	}
}

func TestRecorderRotatesAndKeepsAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	r, m := newTestRecorder(t, Options{File: FileOptions{Path: path, MaxSize: 4 << 10, MaxFiles: -1}, Queue: 100000})
	for range 200 {
		r.Start(Begin{Protocol: "http", Path: "/f"}).End()
	}
	_ = r.Close()
	n := len(readRecords(t, path))
	for _, p := range r.file.rotated() {
		n += len(readRecords(t, p))
	}
	if n != 200 || testutil.ToFloat64(m.Written.WithLabelValues("file")) != 200 {
		t.Errorf("%d records in the files, want 200", n)
	}
}

// collectorServer records the batches it receives.
type collectorServer struct {
	mu      sync.Mutex
	batches [][]byte
	fail    bool
}

func (c *collectorServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-ndjson" {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	c.batches = append(c.batches, b)
}

func (c *collectorServer) lines() (n, largest int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.batches {
		k := bytes.Count(b, []byte("\n"))
		n += k
		largest = max(largest, k)
	}
	return n, largest
}

func TestCollectorBatches(t *testing.T) {
	cs := &collectorServer{}
	srv := httptest.NewServer(cs)
	defer srv.Close()
	r, m := newTestRecorder(t, Options{Collector: CollectorOptions{URL: srv.URL, Batch: 10, Interval: 20 * time.Millisecond}, Queue: 1000})
	for range 95 {
		r.Start(Begin{Protocol: "http", Path: "/f"}).End()
	}
	waitFor(t, "95 records at the collector", func() bool { n, _ := cs.lines(); return n == 95 })
	if _, largest := cs.lines(); largest > 10 {
		t.Errorf("a batch of %d records, want at most 10", largest)
	}
	_ = r.Close()
	if w := testutil.ToFloat64(m.Written.WithLabelValues("collector")); w != 95 {
		t.Errorf("collector written metric %v", w)
	}
}

func TestCollectorDownDropsAndCounts(t *testing.T) {
	cs := &collectorServer{fail: true}
	srv := httptest.NewServer(cs)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "records.jsonl")
	r, m := newTestRecorder(t, Options{File: FileOptions{Path: path},
		Collector: CollectorOptions{URL: srv.URL, Batch: 5, Interval: 10 * time.Millisecond, Queue: 10}, Queue: 10000})
	start := time.Now()
	const n = 2000
	for range n {
		r.Start(Begin{Protocol: "http", Path: "/f"}).End()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("recording %d accesses with the collector down took %v", n, d)
	}
	// The file has them all; the collector's are dropped and counted.
	waitFor(t, "all records in the file", func() bool { return len(readRecords(t, path)) == n })
	_ = r.Close()
	dropped := testutil.ToFloat64(m.Dropped.WithLabelValues("collector_queue_full")) + testutil.ToFloat64(m.Dropped.WithLabelValues("collector_error"))
	if dropped != n {
		t.Errorf("collector drops %v, want %d (none sent, none silent)", dropped, n)
	}
}

func TestCollectorURLChecked(t *testing.T) {
	if _, err := New(Options{Collector: CollectorOptions{URL: "ftp://x"}}); err == nil {
		t.Error("an ftp:// collector was taken")
	}
	if _, err := New(Options{}); err == nil {
		t.Error("a recorder with no file and no collector was taken")
	}
}

// A burst of 100,000 accesses with the collector down: the data path
// never waits, memory stays bounded by the queues, every record is
// written or counted as dropped.
func TestBurstCollectorDownBounded(t *testing.T) {
	ln := httptest.NewServer(http.NotFoundHandler())
	dead := ln.URL
	ln.Close() // nothing listens: every POST fails
	path := filepath.Join(t.TempDir(), "records.jsonl")
	r, m := newTestRecorder(t, Options{File: FileOptions{Path: path, MaxSize: 8 << 20, MaxFiles: 2},
		Collector: CollectorOptions{URL: dead, Batch: 100, Interval: 10 * time.Millisecond}})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 100000
	start := time.Now()
	for range n {
		a := r.Start(Begin{Protocol: "root", Op: "open", Path: "/store/burst/file.root", Client: "192.0.2.1:1234"})
		a.Read(4096)
		a.End()
	}
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
		t.Errorf("heap grew %d MiB during the burst", grown>>20)
	}
	if took > 10*time.Second {
		t.Errorf("%d accesses took %v", n, took)
	}
	_ = r.Close()
	file := testutil.ToFloat64(m.Written.WithLabelValues("file")) + testutil.ToFloat64(m.Dropped.WithLabelValues("queue_full"))
	coll := testutil.ToFloat64(m.Written.WithLabelValues("collector")) + testutil.ToFloat64(m.Dropped.WithLabelValues("collector_queue_full")) +
		testutil.ToFloat64(m.Dropped.WithLabelValues("collector_error"))
	written := testutil.ToFloat64(m.Written.WithLabelValues("file"))
	if file != n || coll != written {
		t.Errorf("file: %v written or dropped of %d; collector: %v sent or dropped of the %v written", file, n, coll, written)
	}
	t.Logf("%d accesses in %v; %v written, %v dropped at the queue", n, took, written, testutil.ToFloat64(m.Dropped.WithLabelValues("queue_full")))
}

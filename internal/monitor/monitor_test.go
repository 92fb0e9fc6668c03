package monitor

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wanda-fed/wanda/internal/metrics"
)

// readRecords parses the JSON lines of a file.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTestRecorder(t *testing.T, o Options) (*Recorder, *metrics.Records) {
	t.Helper()
	m := metrics.NewRecords(prometheus.NewRegistry(), "server")
	o.Metrics = m
	if o.Role == "" {
		o.Role = "server"
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, m
}

func TestRecordWrittenAtEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	r, m := newTestRecorder(t, Options{File: FileOptions{Path: path}, Site: "A"})
	r.SetServer("http://127.0.0.1:1")
	a := r.Start(Begin{Protocol: "root", Op: "open", Path: "/store/f?authz=Bearer%20secret", Client: "127.0.0.1:5"})
	a.SetUser("alice")
	a.SetSize(100)
	a.Read(10)
	a.Read(20)
	a.ReadV(3, 30)
	a.Write(7)
	a.CacheBytes(40, 20)
	a.End()
	a.End() // once only
	waitFor(t, "the record in the file", func() bool { return len(readRecords(t, path)) == 1 })
	got := readRecords(t, path)[0]
	want := Record{Type: TypeAccess, Role: "server", Site: "A", Server: "http://127.0.0.1:1", Protocol: "root", Op: "open",
		Path: "/store/f", Client: "127.0.0.1:5", User: "alice", Size: 100, BytesRead: 60, BytesWritten: 7,
		Reads: 2, ReadBytes: 30, Readvs: 1, ReadvSegs: 3, ReadvBytes: 30, Writes: 1, WriteBytes: 7,
		Result: ResultOK, CacheHitBytes: 40, CacheMissBytes: 20}
	got.ID, got.Start, got.End, got.Duration = 0, time.Time{}, time.Time{}, 0
	if got.Path != want.Path || got.BytesRead != want.BytesRead || got.User != want.User || got.Readvs != 1 ||
		got.ReadvSegs != 3 || got.Writes != 1 || got.CacheMissBytes != 20 || got.Server != want.Server || got.Site != "A" || got.Result != ResultOK {
		t.Errorf("record:\n got %+v\nwant %+v", got, want)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "secret") {
		t.Errorf("the token of the query reached the file: %s", b)
	}
	if n := testutil.ToFloat64(m.Written.WithLabelValues("file")); n != 1 {
		t.Errorf("written metric %v, want 1", n)
	}
}

func TestRecordAnonymousAndFailed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	r, _ := newTestRecorder(t, Options{File: FileOptions{Path: path}})
	a := r.Start(Begin{Protocol: "http", Op: "GET", Path: "/missing"})
	a.Fail(HTTPClass(404), 404)
	a.End()
	waitFor(t, "the record", func() bool { return len(readRecords(t, path)) == 1 })
	got := readRecords(t, path)[0]
	if got.User != Anonymous || got.Result != ResultError || got.ErrorClass != ClassNotFound || got.Status != 404 || got.Size != -1 {
		t.Errorf("got %+v", got)
	}
}

func TestNilAccessIsANoop(t *testing.T) {
	a := Start(nil, Begin{Path: "/x"})
	if a != nil {
		t.Fatal("a nil sink gave an access")
	}
	a.Read(1)
	a.ReadV(1, 1)
	a.Write(1)
	a.SetUser("x")
	a.Fail("", 1)
	a.End()
	if a.Counted() {
		t.Error("a nil access counted")
	}
}

func TestQueueFullDropsAndCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	r, m := newTestRecorder(t, Options{File: FileOptions{Path: path}, Queue: 1})
	// Hold the writer: fill the queue faster than one slot can drain.
	const n = 5000
	for range n {
		r.Start(Begin{Protocol: "http", Path: "/f"}).End()
	}
	_ = r.Close()
	written := int(testutil.ToFloat64(m.Written.WithLabelValues("file")))
	dropped := int(testutil.ToFloat64(m.Dropped.WithLabelValues("queue_full")))
	if written+dropped != n {
		t.Errorf("written %d + dropped %d != %d", written, dropped, n)
	}
	if dropped == 0 {
		t.Errorf("a queue of 1 took %d records at once without dropping any", n)
	}
	if got := len(readRecords(t, path)); got != written {
		t.Errorf("file has %d records, metric says %d", got, written)
	}
	// After Close: dropped as "closed", never a panic.
	r.Start(Begin{Path: "/late"}).End()
	if c := testutil.ToFloat64(m.Dropped.WithLabelValues("closed")); c != 1 {
		t.Errorf("closed drops %v, want 1", c)
	}
}

func TestProgressRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	r, _ := newTestRecorder(t, Options{File: FileOptions{Path: path}, Progress: 20 * time.Millisecond})
	a := r.Start(Begin{Protocol: "root", Op: "open", Path: "/long"})
	a.Read(1000)
	waitFor(t, "a progress record", func() bool {
		for _, rec := range readRecords(t, path) {
			if rec.Type == TypeProgress && rec.BytesRead == 1000 && rec.Result == ResultActive {
				return true
			}
		}
		return false
	})
	a.End()
	waitFor(t, "the final record", func() bool {
		recs := readRecords(t, path)
		last := recs[len(recs)-1]
		return last.Type == TypeAccess && last.ID == recs[0].ID
	})
}

func TestContext(t *testing.T) {
	r, _ := newTestRecorder(t, Options{File: FileOptions{Path: filepath.Join(t.TempDir(), "r")}})
	a := r.Start(Begin{})
	ctx := NewContext(t.Context(), a)
	if FromContext(ctx) != a || FromContext(t.Context()) != nil {
		t.Error("context does not carry the access")
	}
	a.End()
}

// BenchmarkAccessRead is the hot path: counting one read.
func BenchmarkAccessRead(b *testing.B) {
	r, err := New(Options{File: FileOptions{Path: filepath.Join(b.TempDir(), "r")}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	a := r.Start(Begin{Protocol: "root", Path: "/f"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.Read(4096)
		}
	})
	a.End()
}

// BenchmarkAccessReadV counts one vector read.
func BenchmarkAccessReadV(b *testing.B) {
	r, err := New(Options{File: FileOptions{Path: filepath.Join(b.TempDir(), "r")}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	a := r.Start(Begin{Protocol: "root", Path: "/f"})
	b.ReportAllocs()
	for b.Loop() {
		a.ReadV(1000, 1<<20)
	}
	a.End()
}

// BenchmarkAccessLifecycle is one whole access: start, a read, end
// (queued; the writer encodes it on its own goroutine).
func BenchmarkAccessLifecycle(b *testing.B) {
	r, err := New(Options{File: FileOptions{Path: filepath.Join(b.TempDir(), "r")}, Queue: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		a := r.Start(Begin{Protocol: "http", Op: "GET", Path: "/store/f", Client: "127.0.0.1:1"})
		a.Read(4096)
		a.End()
	}
}

func TestAccessReadAllocs(t *testing.T) {
	r, _ := newTestRecorder(t, Options{File: FileOptions{Path: filepath.Join(t.TempDir(), "r")}})
	a := r.Start(Begin{})
	if n := testing.AllocsPerRun(1000, func() { a.Read(4096); a.ReadV(10, 100); a.Write(5) }); n != 0 {
		t.Errorf("counting a read allocates %v times", n)
	}
	a.End()
}

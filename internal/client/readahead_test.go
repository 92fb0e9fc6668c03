package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// raFixture is a wanda server exporting a temporary directory as /data,
// behind a proxy that counts GETs and can answer requests itself (to fail
// or hold them).
type raFixture struct {
	Dir    string // the exported directory
	Server string // the wanda server's base URL
	Proxy  string // the proxy's base URL
	gets   atomic.Int64
	mu     sync.Mutex
	hook   func(w http.ResponseWriter, r *http.Request) bool // true: answered
}

func newRAFixture(t testing.TB) *raFixture {
	t.Helper()
	srv := testserver.Start(t, config.Export{Prefix: "/data", Path: t.TempDir()})
	fx := &raFixture{Dir: srv.Dir("/data"), Server: srv.URL}

	target, _ := url.Parse(fx.Server)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{Proxy: nil, DisableCompression: true}
	rp.ErrorLog = nil
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			fx.gets.Add(1)
		}
		fx.mu.Lock()
		hook := fx.hook
		fx.mu.Unlock()
		if hook != nil && hook(w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	fx.Proxy = proxy.URL
	// Runs before the server's cleanup: the proxy goes first.
	t.Cleanup(func() {
		proxy.CloseClientConnections()
		proxy.Close()
		rp.Transport.(*http.Transport).CloseIdleConnections()
	})
	return fx
}

// setHook installs h in the proxy (nil: forward everything).
func (fx *raFixture) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	fx.mu.Lock()
	fx.hook = h
	fx.mu.Unlock()
}

// put writes size random bytes as /data/name and returns them.
func (fx *raFixture) put(t testing.TB, name string, size int, seed uint64) []byte {
	t.Helper()
	b := make([]byte, size)
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := rnd.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(rnd.Uint32())
	}
	// Write and rename: a replaced file gets a new inode (and ETag).
	tmp := filepath.Join(fx.Dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(fx.Dir, name)); err != nil {
		t.Fatal(err)
	}
	return b
}

// raRange is where a GET's Range begins (0 without one).
func raRange(r *http.Request) (first, last int64) {
	v, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	if !ok {
		return 0, -1
	}
	a, b, _ := strings.Cut(v, "-")
	first, _ = strconv.ParseInt(a, 10, 64)
	last, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		last = -1
	}
	return first, last
}

func raClient() *client.Client {
	c := client.New()
	c.Policy.Backoff = time.Millisecond
	c.Policy.MaxBackoff = 10 * time.Millisecond
	return c
}

func raOpen(t testing.TB, c *client.Client, u string) *client.File {
	t.Helper()
	f, err := c.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// raWaitUntil polls cond until it holds or d passes.
func raWaitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// raNoGoroutinesIn fails when a goroutine still runs code of the named
// type (e.g. "client.(*SeqReader)"), polling a while for them to end.
func raNoGoroutinesIn(t testing.TB, frame string) {
	t.Helper()
	var dump string
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		dump = string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(dump, frame) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left in %s:\n%s", frame, dump)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// raReadAll reads r to the end in chunk-sized reads and counts them.
func raReadAll(r io.Reader, chunk int) ([]byte, int, error) {
	var out bytes.Buffer
	buf := make([]byte, chunk)
	reads := 0
	for {
		n, err := r.Read(buf)
		reads++
		out.Write(buf[:n])
		if err == io.EOF {
			return out.Bytes(), reads, nil
		}
		if err != nil {
			return out.Bytes(), reads, err
		}
	}
}

func TestSeqReaderSequential(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "seq.bin", 20<<20, 1)
	f := raOpen(t, raClient(), fx.Proxy+"/data/seq.bin")
	r := f.Reader(client.ReadAheadOptions{})
	before := fx.gets.Load()
	got, reads, err := raReadAll(r, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, differ from the file's %d", len(got), len(want))
	}
	gets := fx.gets.Load() - before
	t.Logf("%d reads of 64 KiB, %d GETs, %d windows, %d direct", reads, gets, r.Stats.Windows.Load(), r.Stats.Direct.Load())
	// One direct read, then 4 MiB windows.
	if max := int64(1 + (20<<20)/client.DefaultReadAheadWindow + 1); gets > max || gets >= int64(reads) {
		t.Errorf("%d GETs for %d reads, want at most %d", gets, reads, max)
	}
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Errorf("read at the end = %d, %v; want 0, EOF", n, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	raNoGoroutinesIn(t, "client.(*SeqReader)")
	if _, err := r.Read(make([]byte, 10)); err == nil {
		t.Error("read after Close succeeded")
	}
}

func TestSeqReaderWriteTo(t *testing.T) {
	fx := newRAFixture(t)
	const size = 10<<20 + 12345
	want := fx.put(t, "wt.bin", size, 2)
	f := raOpen(t, raClient(), fx.Proxy+"/data/wt.bin")
	r := f.Reader(client.ReadAheadOptions{Window: 1 << 20, Depth: 3})
	defer r.Close()
	// Start mid-file: WriteTo writes from the read position.
	if _, err := r.Seek(1000, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	before := fx.gets.Load()
	var got bytes.Buffer
	n, err := io.Copy(&got, r)
	if err != nil || n != size-1000 {
		t.Fatalf("io.Copy = %d, %v", n, err)
	}
	if !bytes.Equal(got.Bytes(), want[1000:]) {
		t.Fatal("bytes differ")
	}
	if gets, windows := fx.gets.Load()-before, int64((size-1000+(1<<20)-1)/(1<<20)); gets != windows {
		t.Errorf("%d GETs, want %d (1 MiB windows)", gets, windows)
	}
}

func TestSeqReaderRandomReadsDoNotPrefetch(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "rand.bin", 8<<20, 3)
	f := raOpen(t, raClient(), fx.Proxy+"/data/rand.bin")
	r := f.Reader(client.ReadAheadOptions{})
	defer r.Close()
	before := fx.gets.Load()
	buf := make([]byte, 64<<10)
	const reads = 40
	for i := range reads {
		off := int64(len(want)) - int64(i+1)*150_000 // backwards: never sequential
		if _, err := r.Seek(off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want[off:off+int64(len(buf))]) {
			t.Fatalf("read %d at %d: bytes differ", i, off)
		}
	}
	if gets := fx.gets.Load() - before; gets != reads {
		t.Errorf("%d GETs for %d random reads", gets, reads)
	}
	if w := r.Stats.Windows.Load(); w != 0 {
		t.Errorf("%d read-ahead windows for random reads", w)
	}
}

func TestSeqReaderSeek(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "seek.bin", 12<<20, 4)
	f := raOpen(t, raClient(), fx.Proxy+"/data/seek.bin")
	r := f.Reader(client.ReadAheadOptions{Window: 1 << 20, Depth: 4})
	defer r.Close()
	buf := make([]byte, 64<<10)
	pos := int64(0)
	read := func(what string) {
		t.Helper()
		n, err := io.ReadFull(r, buf)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(buf[:n], want[pos:pos+int64(n)]) {
			t.Fatalf("%s: bytes at %d differ", what, pos)
		}
		pos += int64(n)
	}
	for range 3 {
		read("sequential")
	}
	if r.Stats.Windows.Load() == 0 {
		t.Fatal("no read-ahead after three sequential reads")
	}
	// A small forward skip stays inside the windows: nothing restarts.
	windows, restarts := r.Stats.Windows.Load(), r.Stats.Restarts.Load()
	p, err := r.Seek(100<<10, io.SeekCurrent)
	if err != nil || p != pos+100<<10 {
		t.Fatalf("Seek = %d, %v", p, err)
	}
	pos = p
	read("after a small skip")
	if r.Stats.Windows.Load() != windows || r.Stats.Restarts.Load() != restarts {
		t.Errorf("a skip within the windows restarted read-ahead (windows %d -> %d, restarts %d -> %d)",
			windows, r.Stats.Windows.Load(), restarts, r.Stats.Restarts.Load())
	}
	// Back to the start: outside the windows.
	if p, err := r.Seek(0, io.SeekStart); err != nil || p != 0 {
		t.Fatalf("Seek(0) = %d, %v", p, err)
	}
	pos = 0
	if r.Stats.Restarts.Load() != restarts+1 {
		t.Errorf("restarts = %d, want %d", r.Stats.Restarts.Load(), restarts+1)
	}
	for range 4 {
		read("after seeking back")
	}
	// Far forward, then to the end.
	if p, err := r.Seek(9<<20+17, io.SeekStart); err != nil || p != 9<<20+17 {
		t.Fatalf("Seek = %d, %v", p, err)
	}
	pos = 9<<20 + 17
	for range 3 {
		read("after seeking forward")
	}
	if p, err := r.Seek(-1000, io.SeekEnd); err != nil || p != int64(len(want))-1000 {
		t.Fatalf("Seek(-1000, End) = %d, %v", p, err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(rest, want[len(want)-1000:]) {
		t.Fatalf("tail: %d bytes, %v", len(rest), err)
	}
	if _, err := r.Seek(-1, io.SeekStart); err == nil {
		t.Error("Seek to -1 succeeded")
	}
	if _, err := r.Seek(0, 7); err == nil {
		t.Error("Seek with whence 7 succeeded")
	}
	// Past the end: EOF.
	if _, err := r.Seek(int64(len(want))+5, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("read past the end = %d, %v", n, err)
	}
}

func TestSeqReaderErrorAtItsWindow(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "err.bin", 16<<20, 5)
	const bad = 9<<20 + 123 // a request covering this byte is refused
	const window = 1 << 20
	fx.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		first, last := raRange(r)
		if r.Method == http.MethodGet && first <= bad && (last < 0 || last >= bad) {
			http.Error(w, "refused", http.StatusForbidden)
			return true
		}
		return false
	})
	f := raOpen(t, raClient(), fx.Proxy+"/data/err.bin")
	r := f.Reader(client.ReadAheadOptions{Window: window, Depth: 4})
	defer r.Close()
	got, _, err := raReadAll(r, 64<<10)
	if !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("error = %v, want the window's 403", err)
	}
	at := int64(len(got))
	if at > bad || at <= bad-window {
		t.Errorf("error after %d bytes; want it at the start of the window holding byte %d", at, bad)
	}
	if !bytes.Equal(got, want[:at]) {
		t.Error("bytes before the error differ")
	}
	// The windows after the failed one were fetched (or in flight) already:
	// the error was not reported early because of them, nor late.
	if r.Stats.Windows.Load() < 3 {
		t.Errorf("%d windows", r.Stats.Windows.Load())
	}
	// Once the server serves again, the reader goes on from there.
	fx.setHook(nil)
	rest, _, err := raReadAll(r, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(got, rest...), want) {
		t.Error("bytes after recovering differ")
	}
}

func TestSeqReaderCloseMidFlight(t *testing.T) {
	fx := newRAFixture(t)
	fx.put(t, "hold.bin", 32<<20, 6)
	var held atomic.Int64
	fx.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if first, _ := raRange(r); r.Method == http.MethodGet && first > 0 {
			held.Add(1)
			<-r.Context().Done() // until the client gives up
			return true
		}
		return false
	})
	f := raOpen(t, raClient(), fx.Proxy+"/data/hold.bin")
	r := f.Reader(client.ReadAheadOptions{Window: 1 << 20, Depth: 4})
	if _, err := r.Read(make([]byte, 4096)); err != nil { // direct, from 0
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 4096)) // starts read-ahead: held
		done <- err
	}()
	raWaitUntil(t, 10*time.Second, "windows in flight", func() bool { return held.Load() >= 2 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("read interrupted by Close succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the blocked read")
	}
	raNoGoroutinesIn(t, "client.(*SeqReader)")
}

func TestSeqReaderContext(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "ctx.bin", 3<<20, 7)
	f := raOpen(t, raClient(), fx.Proxy+"/data/ctx.bin")
	ctx, cancel := context.WithCancel(context.Background())
	r := f.ReaderContext(ctx, client.ReadAheadOptions{Window: 256 << 10})
	defer r.Close()
	buf := make([]byte, 100_000)
	if _, err := io.ReadFull(r, buf); err != nil || !bytes.Equal(buf, want[:len(buf)]) {
		t.Fatalf("first read: %v", err)
	}
	cancel()
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Errorf("read after the context ended: %v, want context.Canceled", err)
	}
}

// BenchmarkSeqReader compares reading a 64 MiB file front to back in 1 MiB
// pieces with File.ReadAt (one request each) and through a SeqReader, from
// the server directly (loopback) and through a proxy that delays every
// request by 5 ms (a round trip to a nearby site).
func BenchmarkSeqReader(b *testing.B) {
	fx := newRAFixture(b)
	const size = 64 << 20
	fx.put(b, "bench.bin", size, 8)
	fx.setHook(func(http.ResponseWriter, *http.Request) bool {
		time.Sleep(5 * time.Millisecond) // emulated latency, not a wait
		return false
	})
	c := raClient()
	buf := make([]byte, 1<<20)
	drain := func(b *testing.B, r io.Reader) {
		for {
			_, err := r.Read(buf)
			if err == io.EOF {
				return
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, at := range []struct{ name, base string }{{"loopback", fx.Server}, {"rtt5ms", fx.Proxy}} {
		f := raOpen(b, c, at.base+"/data/bench.bin")
		b.Run(at.name+"/ReadAt-1MiB", func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				for off := int64(0); off < size; off += int64(len(buf)) {
					if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
						b.Fatal(err)
					}
				}
			}
		})
		for _, bc := range []struct {
			name string
			o    client.ReadAheadOptions
		}{
			{"SeqReader-Read-1MiB-w4MiB-d4", client.ReadAheadOptions{}},
			{"SeqReader-Read-1MiB-w1MiB-d8", client.ReadAheadOptions{Window: 1 << 20, Depth: 8}},
		} {
			b.Run(at.name+"/"+bc.name, func(b *testing.B) {
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					r := f.Reader(bc.o)
					drain(b, r)
					r.Close()
				}
			})
		}
		b.Run(at.name+"/SeqReader-WriteTo", func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				r := f.Reader(client.ReadAheadOptions{})
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
}

func ExampleFile_Reader() {
	ctx := context.Background()
	f, err := client.New().Open(ctx, "https://wanda.example.org/store/run42.root")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	r := f.Reader(client.ReadAheadOptions{}) // 4 windows of 4 MiB ahead
	defer r.Close()
	if _, err := io.Copy(os.Stdout, r); err != nil {
		fmt.Println(err)
	}
}

// TestSeqReaderSeekPastFirstWindow: a forward seek beyond the first
// window but within the windows in flight reads the right bytes (it used
// to report io.ErrUnexpectedEOF).
func TestSeqReaderSeekPastFirstWindow(t *testing.T) {
	fx := newRAFixture(t)
	data := fx.put(t, "seek.bin", 10<<20, 7)
	f := raOpen(t, raClient(), fx.Server+"/data/seek.bin")
	r := f.Reader(client.ReadAheadOptions{Window: 1 << 20, Depth: 4})
	defer r.Close()
	buf := make([]byte, 4096)
	for i := 0; i < 2; i++ {
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
	}
	const at = 3 << 19 // 1.5 MiB: inside the second window
	if _, err := r.Seek(at, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatalf("read after seek: %v", err)
	}
	if !bytes.Equal(buf, data[at:at+len(buf)]) {
		t.Fatal("wrong bytes after a forward seek within the read-ahead span")
	}
}

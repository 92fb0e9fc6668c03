package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

const (
	lazySeg  = 1 << 20
	lazySize = 5<<20 + 4321 // five segments and a short sixth
)

// lazyOpen opens name of fx through the proxy with 1 MiB segments.
func lazyOpen(t *testing.T, c *client.Client, fx *raFixture, name string, o client.LazyOptions) *client.LazyFile {
	t.Helper()
	if o.Segment == 0 {
		o.Segment = lazySeg
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	l, err := c.OpenLazy(context.Background(), fx.Proxy+"/data/"+name, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLazyReadAt(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "lazy.bin", lazySize, 11)
	l := lazyOpen(t, raClient(), fx, "lazy.bin", client.LazyOptions{})
	defer l.Close()
	if l.Size() != lazySize {
		t.Fatalf("Size = %d", l.Size())
	}
	for _, tc := range []struct {
		off int64
		n   int
	}{
		{0, 10},
		{3*lazySeg + 77, 1000},
		{lazySeg - 5, 10},        // across a segment boundary
		{5*lazySeg + 100, 4000},  // in the short last segment
		{lazySize - 10, 10},      // the last bytes
		{2*lazySeg - 1, lazySeg}, // two segments
		{0, lazySize},            // all of it
	} {
		p := make([]byte, tc.n)
		n, err := l.ReadAt(p, tc.off)
		if err != nil || n != tc.n || !bytes.Equal(p, want[tc.off:tc.off+int64(tc.n)]) {
			t.Errorf("ReadAt(%d, %d) = %d, %v (bytes equal: %v)", tc.n, tc.off, n, err, bytes.Equal(p[:n], want[tc.off:tc.off+int64(n)]))
		}
	}
	// A read past the end is short, with EOF.
	p := make([]byte, 100)
	if n, err := l.ReadAt(p, lazySize-40); n != 40 || err != io.EOF || !bytes.Equal(p[:40], want[lazySize-40:]) {
		t.Errorf("ReadAt over the end = %d, %v", n, err)
	}
	if n, err := l.ReadAt(p, lazySize); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end = %d, %v", n, err)
	}
	if _, err := l.ReadAt(p, -1); err == nil {
		t.Error("ReadAt(-1) succeeded")
	}
	if s := l.Stats.Segments.Load(); s != 6 {
		t.Errorf("%d segments fetched, want 6 (each once)", s)
	}
	if b := l.Stats.BytesFetched.Load(); b != lazySize {
		t.Errorf("%d bytes fetched, want %d", b, lazySize)
	}
}

func TestLazySecondReadMakesNoRequest(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "again.bin", lazySize, 12)
	l := lazyOpen(t, raClient(), fx, "again.bin", client.LazyOptions{Streams: 4})
	defer l.Close()
	p := make([]byte, 5000)
	before := fx.gets.Load()
	if _, err := l.ReadAt(p, 2*lazySeg+10); err != nil {
		t.Fatal(err)
	}
	// 1 MiB over 4 streams: four requests of 256 KiB.
	if g := fx.gets.Load() - before; g != 4 {
		t.Errorf("first read: %d GETs, want 4", g)
	}
	before = fx.gets.Load()
	if _, err := l.ReadAt(p, 3*lazySeg-lazyLen64(p)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, want[3*lazySeg-lazyLen64(p):3*lazySeg]) {
		t.Error("bytes differ")
	}
	if g := fx.gets.Load() - before; g != 0 {
		t.Errorf("second read of the segment: %d GETs", g)
	}
	if h, m := l.Stats.Hits.Load(), l.Stats.Misses.Load(); h != 1 || m != 1 {
		t.Errorf("hits %d misses %d, want 1 and 1", h, m)
	}
	if s := l.Stats.BytesServed.Load(); s != 2*lazyLen64(p) {
		t.Errorf("bytes served %d", s)
	}
}

func lazyLen64(b []byte) int64 { return int64(len(b)) }

func TestLazyConcurrentReadersOneFetch(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "cold.bin", lazySize, 13)
	l := lazyOpen(t, raClient(), fx, "cold.bin", client.LazyOptions{Streams: 4})
	defer l.Close()
	before := fx.gets.Load()
	const readers = 50
	start := make(chan struct{})
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			off := int64(3*lazySeg + i*20_000)
			p := make([]byte, 1000)
			if _, err := l.ReadAt(p, off); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(p, want[off:off+1000]) {
				errs <- fmt.Errorf("reader %d: bytes differ", i)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := l.Stats.Segments.Load(); s != 1 {
		t.Errorf("%d segment fetches, want 1", s)
	}
	if g := fx.gets.Load() - before; g != 4 {
		t.Errorf("%d GETs, want 4 (one segment, four streams)", g)
	}
	if h, m := l.Stats.Hits.Load(), l.Stats.Misses.Load(); h+m != readers {
		t.Errorf("hits %d + misses %d != %d", h, m, readers)
	}
}

func TestLazyReadV(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "v.bin", lazySize, 14)
	l := lazyOpen(t, raClient(), fx, "v.bin", client.LazyOptions{Parallel: 3})
	defer l.Close()
	ranges := []client.Range{
		{Off: 4*lazySeg + 5, Len: 100},
		{Off: 10, Len: 1000},
		{Off: 2*lazySeg - 50, Len: 100}, // segments 1 and 2
		{Off: 20, Len: 30},              // overlaps the second
		{Off: 4*lazySeg + 500, Len: 0},
		{Off: lazySize - 1, Len: 1},
	}
	dst := make([][]byte, len(ranges))
	for i, r := range ranges {
		dst[i] = make([]byte, r.Len)
	}
	if err := l.ReadV(context.Background(), ranges, dst); err != nil {
		t.Fatal(err)
	}
	for i, r := range ranges {
		if !bytes.Equal(dst[i], want[r.Off:r.Off+r.Len]) {
			t.Errorf("range %d (%d+%d): bytes differ", i, r.Off, r.Len)
		}
	}
	// Segments 0, 1, 2, 4 and 5.
	if s := l.Stats.Segments.Load(); s != 5 {
		t.Errorf("%d segments fetched, want 5", s)
	}
	if err := l.ReadV(context.Background(), []client.Range{{Off: lazySize - 1, Len: 2}}, [][]byte{make([]byte, 2)}); err == nil {
		t.Error("ReadV past the end succeeded")
	}
	if err := l.ReadV(context.Background(), []client.Range{{Off: 0, Len: 2}}, [][]byte{make([]byte, 3)}); err == nil {
		t.Error("ReadV with a wrong buffer succeeded")
	}
}

func TestLazyKeepReusesShadow(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "keep.bin", lazySize, 15)
	dir := t.TempDir()
	c := raClient()
	o := client.LazyOptions{Dir: dir, Keep: true}
	l := lazyOpen(t, c, fx, "keep.bin", o)
	p := make([]byte, 3000)
	for _, off := range []int64{lazySeg + 1, 3*lazySeg + 2} {
		if _, err := l.ReadAt(p, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if names := dirEntries(t, dir); len(names) != 2 || !strings.HasSuffix(names[0], ".json") || !strings.HasSuffix(names[1], ".shadow") {
		t.Fatalf("kept files: %v, want a shadow and its record", names)
	}

	before := fx.gets.Load()
	l = lazyOpen(t, c, fx, "keep.bin", o)
	defer l.Close()
	if r := l.Stats.Reused.Load(); r != 2 {
		t.Errorf("%d segments reused, want 2", r)
	}
	for _, off := range []int64{lazySeg + 500, 4*lazySeg - lazyLen64(p)} {
		if _, err := l.ReadAt(p, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, want[off:off+lazyLen64(p)]) {
			t.Errorf("reused bytes at %d differ", off)
		}
	}
	if g := fx.gets.Load() - before; g != 0 {
		t.Errorf("%d GETs for segments kept from before", g)
	}
	// The others are fetched as usual.
	if _, err := l.ReadAt(p, 0); err != nil || !bytes.Equal(p, want[:len(p)]) {
		t.Errorf("segment 0: %v", err)
	}
	if s := l.Stats.Segments.Load(); s != 1 {
		t.Errorf("%d segments fetched, want 1", s)
	}
}

func TestLazyKeepDiscardsChangedRemote(t *testing.T) {
	fx := newRAFixture(t)
	fx.put(t, "chg.bin", lazySize, 16)
	dir := t.TempDir()
	c := raClient()
	o := client.LazyOptions{Dir: dir, Keep: true}
	l := lazyOpen(t, c, fx, "chg.bin", o)
	p := make([]byte, 3000)
	if _, err := l.ReadAt(p, lazySeg); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Same name, same size, other bytes (a new inode: a new ETag).
	want := fx.put(t, "chg.bin", lazySize, 17)
	l = lazyOpen(t, c, fx, "chg.bin", o)
	defer l.Close()
	if r := l.Stats.Reused.Load(); r != 0 {
		t.Errorf("%d segments reused from a shadow of another version", r)
	}
	before := fx.gets.Load()
	if _, err := l.ReadAt(p, lazySeg); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, want[lazySeg:lazySeg+len(p)]) {
		t.Error("stale bytes served after the remote file changed")
	}
	if fx.gets.Load() == before {
		t.Error("no request for a segment of the changed file")
	}
}

func TestLazyCloseRemovesShadow(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "tmp.bin", lazySize, 18)
	dir := t.TempDir()
	l := lazyOpen(t, raClient(), fx, "tmp.bin", client.LazyOptions{Dir: dir})
	p := make([]byte, 2*lazySeg)
	if _, err := l.ReadAt(p, 100); err != nil || !bytes.Equal(p, want[100:100+len(p)]) {
		t.Fatalf("ReadAt: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("left in the shadow directory: %v", names)
	}
	if _, err := l.ReadAt(p, 0); err == nil {
		t.Error("ReadAt after Close succeeded")
	}
	raNoGoroutinesIn(t, "client.(*LazyFile)")
}

func TestLazyFailedSegmentIsRetried(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "fail.bin", lazySize, 19)
	var refuse atomic.Bool
	refuse.Store(true)
	fx.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		first, _ := raRange(r)
		if r.Method == http.MethodGet && first >= 2*lazySeg && first < 3*lazySeg && refuse.Load() {
			http.Error(w, "refused", http.StatusForbidden)
			return true
		}
		return false
	})
	l := lazyOpen(t, raClient(), fx, "fail.bin", client.LazyOptions{})
	defer l.Close()
	const readers = 8
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.ReadAt(make([]byte, 10), 2*lazySeg+5); errors.Is(err, client.ErrForbidden) {
				failed.Add(1)
			} else {
				t.Errorf("read of a refused segment: %v", err)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != readers {
		t.Fatalf("%d of %d readers saw the failure", failed.Load(), readers)
	}
	refuse.Store(false)
	p := make([]byte, 10)
	if _, err := l.ReadAt(p, 2*lazySeg+5); err != nil || !bytes.Equal(p, want[2*lazySeg+5:2*lazySeg+15]) {
		t.Fatalf("read after the server recovered: %v", err)
	}
}

func TestLazyKeepInUseGetsPrivateShadow(t *testing.T) {
	fx := newRAFixture(t)
	want := fx.put(t, "two.bin", lazySize, 20)
	dir := t.TempDir()
	c := raClient()
	o := client.LazyOptions{Dir: dir, Keep: true}
	a := lazyOpen(t, c, fx, "two.bin", o)
	b := lazyOpen(t, c, fx, "two.bin", o) // the kept shadow is a's (flock)
	p := make([]byte, 100)
	for _, l := range []*client.LazyFile{a, b} {
		if _, err := l.ReadAt(p, 4*lazySeg); err != nil || !bytes.Equal(p, want[4*lazySeg:4*lazySeg+100]) {
			t.Fatalf("ReadAt: %v", err)
		}
	}
	for _, l := range []*client.LazyFile{b, a} {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if names := dirEntries(t, dir); len(names) != 2 {
		t.Errorf("files in the shadow directory: %v, want the kept shadow and its record", names)
	}
}

func TestLazyCloseMidFetch(t *testing.T) {
	fx := newRAFixture(t)
	fx.put(t, "slow.bin", lazySize, 21)
	var held atomic.Int64
	fx.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet {
			held.Add(1)
			<-r.Context().Done()
			return true
		}
		return false
	})
	l := lazyOpen(t, raClient(), fx, "slow.bin", client.LazyOptions{Keep: true})
	done := make(chan error, 1)
	go func() {
		_, err := l.ReadAt(make([]byte, 10), 0)
		done <- err
	}()
	raWaitUntil(t, 10*time.Second, "a segment fetch in flight", func() bool { return held.Load() >= 1 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("read interrupted by Close succeeded")
	}
	raNoGoroutinesIn(t, "client.(*LazyFile)")
}

func ExampleClient_OpenLazy() {
	ctx := context.Background()
	l, err := client.New().OpenLazy(ctx, "https://wanda.example.org/store/run42.root",
		client.LazyOptions{Dir: "/var/cache/wanda", Keep: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	header := make([]byte, 4096)
	if _, err := l.ReadAt(header, 0); err != nil { // fetches the first 128 MiB
		fmt.Println(err)
	}
}

package client_test

// Every fault a network or a server inflicts ends in a byte-identical
// destination or a clear failure, never in a silent corruption. The
// origin is a real wanda server; the faults come from the front
// (faultserver_test.go).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// originAndFront starts an origin holding data at /data/name and a front to it.
func originAndFront(t *testing.T, name string, data []byte) (*origin, *faultFront, string) {
	t.Helper()
	o := startOrigin(t)
	o.put(t, name, data)
	fr := startFront(t, o.URL)
	return o, fr, fr.URL + "/data/" + name
}

// copyAndCheck copies src with c into a fresh directory, fails the test
// on an error, and checks the destination holds want.
func copyAndCheck(t *testing.T, c *client.Client, src string, o client.CopyOptions, want []byte) client.Result {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "f.bin")
	res, err := copySingle(t, c, src, dst, o)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), want)
	return res
}

func TestDropMidBodyResumesAtOffset(t *testing.T) {
	data := seededBytes(3<<20+17, 1)
	size := int64(len(data))
	const at = 1<<20 + 5
	for name, k := range map[string]faultKind{"closed": faultDrop, "short": faultShort} {
		t.Run(name, func(t *testing.T) {
			_, fr, src := originAndFront(t, "f.bin", data)
			fr.add(faultRule{Method: "GET", Times: 1, Kind: k, At: at})
			res := copyAndCheck(t, newFaultClient(t), src, client.CopyOptions{Streams: 1, Checksum: "auto"}, data)
			if res.Retries != 1 || res.Server != fr.Host || !res.Verified {
				t.Errorf("result %+v: want 1 retry, server %s, verified", res, fr.Host)
			}
			gets := fr.requests("GET")
			if len(gets) != 2 {
				t.Fatalf("%d GETs, want 2: %+v", len(gets), gets)
			}
			// One stream and nothing known: the first request is a plain
			// GET of the whole file, whose answer tells the size.
			if gets[0].Range != "" {
				t.Errorf("first Range %q, want none", gets[0].Range)
			}
			if want := fmt.Sprintf("bytes=%d-%d", at, size-1); gets[1].Range != want {
				t.Errorf("retry Range %q, want %q (resume where the drop left off)", gets[1].Range, want)
			}
		})
	}
}

func TestDropMidBodyEightStreams(t *testing.T) {
	data := seededBytes(4<<20+3, 2)
	_, fr, src := originAndFront(t, "f.bin", data)
	const at = 100_000
	// The third chunk request is cut after `at` bytes.
	fr.add(faultRule{Method: "GET", Times: 2, Kind: faultPass}, faultRule{Method: "GET", Times: 1, Kind: faultDrop, At: at})
	res := copyAndCheck(t, newFaultClient(t), src, client.CopyOptions{Streams: 8, ChunkMin: 256 << 10, ChunkMax: 512 << 10, Checksum: "auto"}, data)
	if res.Retries != 1 || res.Streams != 8 || !res.Verified {
		t.Errorf("result %+v: want 1 retry, 8 streams, verified", res)
	}
	gets := fr.requests("GET")
	var dropped *seenRequest
	for i := range gets {
		if gets[i].Kind == faultDrop {
			dropped = &gets[i]
		}
	}
	if dropped == nil {
		t.Fatalf("no request was dropped: %+v", gets)
	}
	first, last := parseRangeHeader(t, dropped.Range)
	want := fmt.Sprintf("bytes=%d-%d", first+at, last)
	n := 0
	for _, g := range gets {
		if g.Range == want {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d requests for %q (the rest of the dropped chunk %q), want 1; all: %+v", n, want, dropped.Range, gets)
	}
}

// A reset (RST) may lose bytes the client had not read yet: the retry
// starts somewhere in what was sent, never past it.
func TestResetMidBody(t *testing.T) {
	data := seededBytes(2<<20, 3)
	_, fr, src := originAndFront(t, "f.bin", data)
	const at = 500_000
	fr.add(faultRule{Method: "GET", Times: 1, Kind: faultReset, At: at})
	res := copyAndCheck(t, newFaultClient(t), src, client.CopyOptions{Streams: 1, Checksum: "adler32"}, data)
	gets := fr.requests("GET")
	if len(gets) != 2 || res.Retries != 1 {
		t.Fatalf("%d GETs, %d retries; want 2 and 1", len(gets), res.Retries)
	}
	if first, _ := parseRangeHeader(t, gets[1].Range); first > at {
		t.Errorf("retry Range %q starts past the %d bytes sent", gets[1].Range, at)
	}
}

func TestServerErrorOnceIsRetried(t *testing.T) {
	data := seededBytes(300_001, 4)
	_, fr, src := originAndFront(t, "f.bin", data)
	fr.add(faultRule{Method: "GET", Times: 1, Kind: faultStatus, Status: 500})
	res := copyAndCheck(t, newFaultClient(t), src, client.CopyOptions{Checksum: "auto"}, data)
	if res.Retries != 1 || len(fr.requests("GET")) != 2 {
		t.Errorf("%d retries, %d GETs; want 1 and 2", res.Retries, len(fr.requests("GET")))
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	data := seededBytes(10_000, 5)
	_, fr, src := originAndFront(t, "f.bin", data)
	fr.add(faultRule{Method: "GET", Times: 1, Kind: faultStatus, Status: 503, Header: http.Header{"Retry-After": {"1"}}})
	res := copyAndCheck(t, newFaultClient(t), src, client.CopyOptions{}, data)
	gets := fr.requests("GET")
	if len(gets) != 2 || res.Retries != 1 {
		t.Fatalf("%d GETs, %d retries; want 2 and 1", len(gets), res.Retries)
	}
	if gap := gets[1].At.Sub(gets[0].At); gap < 950*time.Millisecond {
		t.Errorf("retried %v after a 503 with Retry-After: 1", gap)
	}
	if res.Server != fr.Host {
		t.Errorf("server %q, want %q (a 503 with Retry-After is no reason to leave)", res.Server, fr.Host)
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	data := seededBytes(1000, 6)
	for _, tc := range []struct {
		code int
		want error
	}{
		{404, client.ErrNotFound},
		{403, client.ErrForbidden},
		{401, client.ErrUnauthorized},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			_, fr, src := originAndFront(t, "f.bin", data)
			c := newFaultClient(t)
			ctx := context.Background()

			// Copy: the first request (its first GET) fails, and nothing
			// more.
			fr.add(faultRule{Path: "/data/f.bin", Kind: faultStatus, Status: tc.code, Times: 1})
			dir := t.TempDir()
			_, err := c.Copy(ctx, []string{src}, filepath.Join(dir, "f.bin"), client.CopyOptions{})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), fmt.Sprint(tc.code)) {
				t.Errorf("Copy: %v, want %v mentioning %d", err, tc.want, tc.code)
			}
			if n := len(fr.requests("")); n != 1 {
				t.Errorf("Copy sent %d requests, want 1: %+v", n, fr.requests(""))
			}
			if names := dirEntries(t, dir); len(names) != 0 {
				t.Errorf("Copy left %v", names)
			}

			// ReadAt: the GET fails once and is not asked again.
			f, err := c.Open(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			fr.add(faultRule{Method: "GET", Kind: faultStatus, Status: tc.code})
			before := len(fr.requests("GET"))
			_, err = f.ReadAt(make([]byte, 10), 0)
			if !errors.Is(err, tc.want) {
				t.Errorf("ReadAt: %v, want %v", err, tc.want)
			}
			if n := len(fr.requests("GET")) - before; n != 1 {
				t.Errorf("ReadAt sent %d GETs, want 1", n)
			}
		})
	}
}

func TestStallIsAbortedAndRetried(t *testing.T) {
	data := seededBytes(1<<20, 7)
	size := int64(len(data))
	_, fr, src := originAndFront(t, "f.bin", data)
	const at = 200_000
	fr.add(faultRule{Method: "GET", Times: 1, Kind: faultStall, At: at})
	c := newFaultClient(t)
	c.Policy.Stall = 300 * time.Millisecond
	start := time.Now()
	res := copyAndCheck(t, c, src, client.CopyOptions{Streams: 1, Checksum: "auto"}, data)
	elapsed := time.Since(start)
	gets := fr.requests("GET")
	if len(gets) != 2 || res.Retries != 1 {
		t.Fatalf("%d GETs, %d retries; want 2 and 1", len(gets), res.Retries)
	}
	if want := fmt.Sprintf("bytes=%d-%d", at, size-1); gets[1].Range != want {
		t.Errorf("retry Range %q, want %q", gets[1].Range, want)
	}
	if gap := gets[1].At.Sub(gets[0].At); gap < c.Policy.Stall {
		t.Errorf("retried %v after the stall began, before the %v stall timeout", gap, c.Policy.Stall)
	}
	if elapsed > 10*time.Second {
		t.Errorf("a stalled copy took %v", elapsed)
	}
}

func TestSlowButMovingIsNotAborted(t *testing.T) {
	data := seededBytes(120<<10, 8) // 30 pieces of 4 KiB, 30 ms apart: ~900 ms
	_, fr, src := originAndFront(t, "f.bin", data)
	fr.add(faultRule{Method: "GET", Kind: faultSlow, Every: 30 * time.Millisecond})
	c := newFaultClient(t)
	// A wide margin over the 30 ms pauses: the test machine may be busy.
	c.Policy.Stall = 600 * time.Millisecond
	dst := filepath.Join(t.TempDir(), "f.bin")
	start := time.Now()
	res, err := copySingle(t, c, src, dst, client.CopyOptions{Checksum: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < c.Policy.Stall {
		t.Fatalf("the slow body took only %v: not longer than the %v stall timeout, the test proves nothing", elapsed, c.Policy.Stall)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
	if res.Retries != 0 || len(fr.requests("GET")) != 1 {
		t.Errorf("%d retries, %d GETs; a slow but moving body must not be aborted", res.Retries, len(fr.requests("GET")))
	}
}

func TestCorruptByte(t *testing.T) {
	data := seededBytes(2<<20+1, 9)
	for _, streams := range []int{1, 4} {
		t.Run(fmt.Sprint("streams", streams), func(t *testing.T) {
			o := client.CopyOptions{Streams: streams, ChunkMin: 256 << 10, ChunkMax: 256 << 10, Checksum: "adler32"}

			t.Run("once", func(t *testing.T) {
				_, fr, src := originAndFront(t, "f.bin", data)
				fr.add(faultRule{Method: "GET", Times: 1, Kind: faultCorrupt, At: 12345})
				res := copyAndCheck(t, newFaultClient(t), src, o, data)
				if res.Retries != 1 || !res.Verified || !strings.HasPrefix(res.Checksum, "adler32:") {
					t.Errorf("result %+v: want 1 retry (the whole file again), verified adler32", res)
				}
			})

			t.Run("always", func(t *testing.T) {
				_, fr, src := originAndFront(t, "f.bin", data)
				fr.add(faultRule{Method: "GET", Kind: faultCorrupt, At: 0})
				dir := t.TempDir()
				dst := filepath.Join(dir, "f.bin")
				res, err := copySingle(t, newFaultClient(t), src, dst, o)
				if !errors.Is(err, client.ErrChecksum) {
					t.Fatalf("Copy: %v, want a checksum mismatch", err)
				}
				if !strings.Contains(res.Error, "mismatch") || !strings.Contains(res.Error, "2 transfers") {
					t.Errorf("result error %q: want the mismatch and the number of tries", res.Error)
				}
				if names := dirEntries(t, dir); len(names) != 0 {
					t.Errorf("a failed checksum left %v (no destination, no part file)", names)
				}
			})
		})
	}
}

func dupLink(u string) http.Header {
	return http.Header{"Link": {"<" + u + ">; rel=duplicate; pri=1"}}
}

// Server A advertises B in the answer that then breaks; after that A
// only fails. The rest comes from B.
func TestFailoverToAdvertisedDuplicate(t *testing.T) {
	data := seededBytes(1<<20, 10)
	o, a, src := originAndFront(t, "f.bin", data)
	b := startFront(t, o.URL)
	const at = 300_000
	a.add(faultRule{Method: "GET", Times: 1, Kind: faultDrop, At: at, Header: dupLink(b.URL + "/data/f.bin")},
		faultRule{Method: "GET", Kind: faultStatus, Status: 500})
	res := copyAndCheck(t, newFaultClient(t), src, client.CopyOptions{Streams: 1, Checksum: "auto"}, data)
	if res.Server != b.Host {
		t.Errorf("server %q, want the duplicate %q", res.Server, b.Host)
	}
	gets := b.requests("GET")
	if len(gets) != 1 || !strings.HasPrefix(gets[0].Range, fmt.Sprintf("bytes=%d-", at)) {
		t.Errorf("B's GETs %+v: want one, resuming at %d", gets, at)
	}
	if n := len(a.requests("GET")); n != 1 {
		t.Errorf("A got %d GETs, want 1 (it failed; B was advertised)", n)
	}
}

// A's earlier answer (the HEAD of Open) advertised B; when A then fails,
// reads go to B.
func TestFailoverAcrossCalls(t *testing.T) {
	data := seededBytes(256<<10, 11)
	o, a, src := originAndFront(t, "f.bin", data)
	b := startFront(t, o.URL)
	a.add(faultRule{Method: "HEAD", Kind: faultPass, Header: dupLink(b.URL + "/data/f.bin")},
		faultRule{Method: "GET", Kind: faultStatus, Status: 500})
	c := newFaultClient(t)
	f, err := c.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1000)
	if _, err := f.ReadAt(got, 5000); err != nil {
		t.Fatalf("ReadAt with A failing and B advertised: %v", err)
	}
	mustEqualBytes(t, "ReadAt", got, data[5000:6000])
	if len(b.requests("GET")) != 1 || len(a.requests("GET")) != 1 {
		t.Errorf("GETs: A %d, B %d; want 1 each (A fails, B serves)", len(a.requests("GET")), len(b.requests("GET")))
	}
}

// A 404 from a server whose earlier answer advertised alternates is still
// final: one request, no failover, no second ask.
func TestNotFoundAfterAdvertisedDuplicateIsFinal(t *testing.T) {
	data := seededBytes(10_000, 11)
	o, a, src := originAndFront(t, "f.bin", data)
	b := startFront(t, o.URL)
	a.add(faultRule{Method: "HEAD", Kind: faultPass, Header: dupLink(b.URL + "/data/f.bin")},
		faultRule{Method: "GET", Kind: faultStatus, Status: 404})
	f, err := newFaultClient(t).Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 10), 0); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("ReadAt: %v, want ErrNotFound", err)
	}
	if na, nb := len(a.requests("GET")), len(b.requests("")); na != 1 || nb != 0 {
		t.Errorf("GETs to A %d, requests to B %d; want 1 and 0", na, nb)
	}
}

// A redirector sends to A, which refuses connections, and advertises B.
func TestFailoverConnectionRefused(t *testing.T) {
	data := seededBytes(500_000, 12)
	_, b, _ := originAndFront(t, "f.bin", data)
	dead := refusedURL(t)
	var hits atomic.Int64
	redir := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Link", "<"+b.URL+r.URL.Path+">; rel=duplicate; pri=1")
		http.Redirect(w, r, dead+r.URL.Path, http.StatusTemporaryRedirect)
	})
	res := copyAndCheck(t, newFaultClient(t), redir+"/data/f.bin", client.CopyOptions{Checksum: "auto"}, data)
	if res.Server != b.Host {
		t.Errorf("server %q, want %q", res.Server, b.Host)
	}
	if hits.Load() != 1 {
		t.Errorf("the redirector was asked %d times, want 1 (its answer is cached)", hits.Load())
	}
}

// After A fails, the redirector is asked again with tried=A and sends B.
func TestRedirectorIsAskedAgainWithTried(t *testing.T) {
	data := seededBytes(400_000, 13)
	_, b, _ := originAndFront(t, "f.bin", data)
	a := startFront(t, "") // only answers 503
	a.add(faultRule{Kind: faultStatus, Status: 503})
	var asked stringLog
	redir := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		asked.add(r.URL.RawQuery)
		to := a.URL
		for _, h := range strings.Split(r.URL.Query().Get("tried"), ",") {
			if h == a.Host {
				to = b.URL
			}
		}
		// The redirector lists the replica it chose, as metalink-style
		// redirectors do: no other alternate to fail over to.
		w.Header().Set("Link", "<"+to+r.URL.Path+">; rel=duplicate; pri=1")
		http.Redirect(w, r, to+r.URL.Path, http.StatusTemporaryRedirect)
	})
	res := copyAndCheck(t, newFaultClient(t), redir+"/data/f.bin", client.CopyOptions{Checksum: "auto"}, data)
	if res.Server != b.Host {
		t.Errorf("server %q, want %q", res.Server, b.Host)
	}
	queries := asked.get()
	if len(queries) != 2 {
		t.Fatalf("redirector asked %d times (%q), want 2", len(queries), queries)
	}
	if q, _ := url.ParseQuery(queries[1]); q.Get("tried") != a.Host {
		t.Errorf("second ask %q: want tried=%s", queries[1], a.Host)
	}
	if len(a.requests("")) != 1 {
		t.Errorf("A was asked %d times, want 1", len(a.requests("")))
	}
}

func TestRedirectLoopIsBounded(t *testing.T) {
	var hits atomic.Int64
	redir := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	})
	c := newFaultClient(t)
	_, err := c.Open(context.Background(), redir+"/data/f.bin")
	if err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Fatalf("Open through a redirect loop: %v, want an error about redirects", err)
	}
	if n := hits.Load(); n != int64(c.Policy.MaxRedirects)+1 {
		t.Errorf("%d requests, want %d (the chain bound, no retries)", n, c.Policy.MaxRedirects+1)
	}
}

func TestRedirectsAreCached(t *testing.T) {
	data := seededBytes(70_000, 14)
	_, fr, _ := originAndFront(t, "f.bin", data)
	var hits atomic.Int64
	redir := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, fr.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	c := newFaultClient(t)
	c.Policy.RouteTTL = 200 * time.Millisecond
	ctx := context.Background()
	start := time.Now()
	for range 2 {
		f, err := c.Open(ctx, redir+"/data/f.bin")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		mustEqualBytes(t, "ReadAt", got, data)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("redirector asked %d times for two Opens and two reads, want 1", n)
	}
	// Past RouteTTL, the redirector is asked again.
	pollUntil(t, 5*time.Second, "redirector never asked again after RouteTTL", func() bool {
		if _, err := c.Open(ctx, redir+"/data/f.bin"); err != nil {
			t.Fatal(err)
		}
		return hits.Load() == 2
	})
	if el := time.Since(start); el < c.Policy.RouteTTL {
		t.Errorf("asked again after %v, before RouteTTL %v", el, c.Policy.RouteTTL)
	}
}

// stringLog collects strings from handler goroutines.
type stringLog struct {
	mu  sync.Mutex
	all []string
}

func (l *stringLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, s)
}

func (l *stringLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.all...)
}

func TestCopyKeepsNoPartialOnFatalError(t *testing.T) {
	data := seededBytes(1<<20, 15)
	_, fr, src := originAndFront(t, "f.bin", data)
	// The file vanishes after the listing: the GET gets 404.
	fr.add(faultRule{Method: "GET", Kind: faultStatus, Status: 404})
	dir := t.TempDir()
	res, err := copySingle(t, newFaultClient(t), src, filepath.Join(dir, "f.bin"), client.CopyOptions{Streams: 4, ChunkMin: 256 << 10, ChunkMax: 256 << 10})
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(res.Error, "404") {
		t.Fatalf("Copy: %v (result %q), want a 404", err, res.Error)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("left %v", names)
	}
	if _, err := os.Stat(filepath.Join(dir, "f.bin")); !os.IsNotExist(err) {
		t.Errorf("destination: %v", err)
	}
}

func TestGiveUpAfterAttempts(t *testing.T) {
	data := seededBytes(100_000, 16)
	_, fr, src := originAndFront(t, "f.bin", data)
	fr.add(faultRule{Method: "GET", Kind: faultStatus, Status: 502})
	c := newFaultClient(t)
	dir := t.TempDir()
	res, err := copySingle(t, c, src, filepath.Join(dir, "f.bin"), client.CopyOptions{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("giving up after %d tries", c.Policy.Attempts)) || !strings.Contains(err.Error(), "502") {
		t.Fatalf("Copy from a server that always fails: %v", err)
	}
	if n := len(fr.requests("GET")); n != c.Policy.Attempts {
		t.Errorf("%d GETs, want %d", n, c.Policy.Attempts)
	}
	if res.Retries != c.Policy.Attempts-1 {
		t.Errorf("Result.Retries %d, want %d (%d tries)", res.Retries, c.Policy.Attempts-1, c.Policy.Attempts)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("nothing arrived, yet the copy left %v", names)
	}
}

// A server that accepts the request and never answers: the stall timeout
// covers the wait for the answer too.
func TestStallBeforeAnswer(t *testing.T) {
	data := seededBytes(100_000, 17)
	_, fr, src := originAndFront(t, "f.bin", data)
	fr.add(faultRule{Method: "GET", Times: 1, Kind: faultPass, Hook: func(r *http.Request) { <-r.Context().Done() }})
	c := newFaultClient(t)
	c.Policy.Stall = 300 * time.Millisecond
	// The client's stall clock starts before its first request reaches the
	// server, so the bound is from the copy's start to the second request.
	start := time.Now()
	res := copyAndCheck(t, c, src, client.CopyOptions{}, data)
	gets := fr.requests("GET")
	if res.Retries != 1 || len(gets) != 2 {
		t.Fatalf("%d retries, %d GETs; want 1 and 2", res.Retries, len(gets))
	}
	if gap := gets[1].At.Sub(start); gap < c.Policy.Stall {
		t.Errorf("gave up after %v, before the stall timeout %v", gap, c.Policy.Stall)
	}
}

// A server without range support (200 to every Range): streams and a
// resumed retry skip to their offset; the bytes are right.
func TestServerWithoutRanges(t *testing.T) {
	data := seededBytes(1<<20+9, 18)
	_, fr, src := originAndFront(t, "f.bin", data)
	fr.NoRange.Store(true)
	// Every answer is the whole file: a cut at 100 kB hits any chunk.
	fr.add(faultRule{Method: "GET", Times: 1, Kind: faultDrop, At: 100_000})
	res := copyAndCheck(t, newFaultClient(t), src, client.CopyOptions{Streams: 3, ChunkMin: 256 << 10, ChunkMax: 256 << 10, Checksum: "auto"}, data)
	if res.Retries != 1 || !res.Verified {
		t.Errorf("result %+v: want 1 retry, verified", res)
	}
}

// Uploads follow a redirector too, and its answer is cached (apart from
// reads': a redirector sends reads to any replica, writes to a writable
// member).
func TestUploadThroughRedirector(t *testing.T) {
	o := startOrigin(t)
	fr := startFront(t, o.URL)
	var hits atomic.Int64
	redir := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			hits.Add(1)
		}
		http.Redirect(w, r, fr.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	c := newFaultClient(t)
	var first int64
	for i, n := range []int{10, 2<<20 + 1} { // small, and large (Expect: 100-continue)
		data := seededBytes(n, uint64(19+i))
		local := filepath.Join(t.TempDir(), "up.bin")
		if err := os.WriteFile(local, data, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := copySingle(t, c, local, redir+"/data/up.bin", client.CopyOptions{Streams: 1, Checksum: "adler32"})
		if err != nil {
			t.Fatal(err)
		}
		mustEqualBytes(t, "uploaded file", o.read(t, "up.bin"), data)
		if res.Server != fr.Host || !res.Verified {
			t.Errorf("result %+v: want server %s, verified", res, fr.Host)
		}
		if i == 0 {
			first = hits.Load()
		}
	}
	if n := hits.Load(); n != first {
		t.Errorf("the second upload's PUT asked the redirector %d times, want 0 (its answer is cached)", n-first)
	}
}

package client_test

// Regressions of a review of the engine: each test is one finding
// (numbered as in the review), reproduced against a real wanda server, a
// fault-injecting front (faultserver_test.go) or a tiny handler that
// behaves as some real servers do.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// lostAnswerFront proxies to upstream and, for the first request whose
// origin answer matches lose, closes the connection instead of answering:
// the origin did the work, the client never hears of it.
func lostAnswerFront(t *testing.T, upstream string, lose func(r *http.Request, status int) bool) (string, *atomic.Bool) {
	t.Helper()
	var lost atomic.Bool
	upc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	t.Cleanup(upc.CloseIdleConnections)
	base := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.ContentLength == 0 {
			body = http.NoBody
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		req.Header.Del("Expect")
		req.ContentLength = r.ContentLength
		resp, err := upc.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if lose(r, resp.StatusCode) && lost.CompareAndSwap(false, true) {
			_, _ = io.Copy(io.Discard, resp.Body)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("lost-answer front: hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	return base, &lost
}

// writeLocal writes data to a new file in a temporary directory.
func writeLocal(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// hangingServer accepts requests and never answers them.
func hangingServer(t *testing.T) string {
	t.Helper()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) }) // after serveFunc's cleanup: handlers end
	return serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	})
}

// 1. A parallel upload whose completing part's answer is lost (the origin
// committed, the connection died before the 201) succeeds, and the file
// is the one sent.
func TestRegressPartsCompletingAnswerLost(t *testing.T) {
	o := startOrigin(t)
	data := seededBytes(16<<20+5, 101) // parts of 8 MiB, 8 MiB and 5 bytes
	front, lost := lostAnswerFront(t, o.URL, func(r *http.Request, status int) bool {
		return r.Method == http.MethodPut && (status == http.StatusCreated || status == http.StatusNoContent)
	})
	c := newFaultClient(t)
	c.Policy.Stall = 500 * time.Millisecond
	res, err := copySingle(t, c, writeLocal(t, "g", data), front+"/data/g", client.CopyOptions{Streams: 4, Checksum: "auto"})
	if !lost.Load() {
		t.Fatal("no completing answer was lost: the test did not test")
	}
	if err != nil {
		t.Fatalf("upload whose completing answer was lost: %v (%+v)", err, res)
	}
	mustEqualBytes(t, "uploaded file", o.read(t, "g"), data)
}

// mutateOnStart is a Progress whose first SetCurrent(0) (upload: after the
// checksum, before the first byte is sent) runs fn.
type mutateOnStart struct {
	fired atomic.Bool
	fn    func()
}

func (p *mutateOnStart) Plan(int, int64)              {}
func (p *mutateOnStart) Bar(string, int64) client.Bar { return p }
func (p *mutateOnStart) SetTotal(int64)               {}
func (p *mutateOnStart) Add(int)                      {}
func (p *mutateOnStart) Done(error)                   {}
func (p *mutateOnStart) SetCurrent(n int64) {
	if n == 0 && p.fired.CompareAndSwap(false, true) {
		p.fn()
	}
}

// 1. Parts whose whole-file digest the server refuses (the source changed
// after its checksum was taken) never end in a claimed success over the
// old file of the same size: the whole file is sent again under a new
// upload id, and a mismatch that persists is reported as one.
func TestRegressPartsDigestMismatch(t *testing.T) {
	o := startOrigin(t)
	const size = 16<<20 + 5
	old := seededBytes(size, 102)
	o.put(t, "f", old)
	fr := startFront(t, o.URL)
	var idMu sync.Mutex
	var ids []string
	fr.add(faultRule{Method: http.MethodPut, Kind: faultPass, Hook: func(r *http.Request) {
		idMu.Lock()
		defer idMu.Unlock()
		if id := r.Header.Get("Wanda-Upload-Id"); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}})
	src := writeLocal(t, "f", seededBytes(size, 103))
	prog := &mutateOnStart{fn: func() {
		f, err := os.OpenFile(src, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("XXXXXXXX"), size-100); err != nil {
			t.Error(err)
		}
	}}
	res, err := copySingle(t, newFaultClient(t), src, fr.URL+"/data/f", client.CopyOptions{Streams: 4, Checksum: "auto", Progress: prog})
	got := o.read(t, "f")
	idMu.Lock()
	defer idMu.Unlock()
	if err == nil {
		// Sent again with a fresh checksum: the server must have the
		// file as it is now.
		mustEqualBytes(t, "server file after a successful upload", got, mustReadFile(t, src))
		return
	}
	if !errors.Is(err, client.ErrChecksum) {
		t.Errorf("error %v: want a checksum mismatch", err)
	}
	if res.Verified {
		t.Errorf("result %+v: a refused upload is not verified", res)
	}
	mustEqualBytes(t, "server file after a refused upload", got, old)
	if len(ids) < 2 {
		t.Errorf("upload ids %v: want the whole file sent again under a new id", ids)
	}
}

// 2. A server that accepts the request and never answers a PROPFIND or a
// HEAD: the stall timeout ends the operation, not the caller's deadline.
func TestRegressStatStall(t *testing.T) {
	base := hangingServer(t)
	c := newFaultClient(t)
	c.Policy.Stall = 300 * time.Millisecond
	c.Policy.Attempts = 2
	for _, tc := range []struct {
		name string
		op   func(ctx context.Context) error
	}{
		{"PROPFIND", func(ctx context.Context) error {
			_, err := c.Copy(ctx, []string{base + "/f"}, filepath.Join(t.TempDir(), "f"), client.CopyOptions{})
			return err
		}},
		{"HEAD", func(ctx context.Context) error {
			_, err := c.Open(ctx, base+"/f")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.op(ctx)
			took := time.Since(start)
			if !errors.Is(err, client.ErrStalled) || ctx.Err() != nil {
				t.Fatalf("after %v: %v; want ErrStalled before the deadline", took, err)
			}
			if took > 5*time.Second {
				t.Errorf("stalled for %v with a stall timeout of %v", took, c.Policy.Stall)
			}
		})
	}
}

// 2. A relay (remote to remote) whose destination stops reading ends with
// ErrStalled within about the stall timeout.
func TestRegressRelayStall(t *testing.T) {
	o := startOrigin(t)
	o.put(t, "big", seededBytes(32<<20, 104))
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	dst := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			http.NotFound(w, r)
			return
		}
		_, _ = io.CopyN(io.Discard, r.Body, 1<<20)
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	})
	c := newFaultClient(t)
	c.Policy.Stall = 500 * time.Millisecond
	c.Policy.Attempts = 2
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Copy(ctx, []string{o.URL + "/data/big"}, dst+"/big", client.CopyOptions{Checksum: "none"})
	took := time.Since(start)
	if !errors.Is(err, client.ErrStalled) || ctx.Err() != nil {
		t.Fatalf("after %v: %v; want ErrStalled before the deadline", took, err)
	}
	if took > 8*time.Second {
		t.Errorf("relay stalled for %v with a stall timeout of %v", took, c.Policy.Stall)
	}
}

// davServer answers PROPFIND with the given multistatus bodies (by path
// and depth, "path depth") and GET and HEAD with content (by path).
func davServer(t *testing.T, props map[string]string, content map[string]string, headNoLength bool) string {
	t.Helper()
	return serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case "PROPFIND":
			body, ok := props[r.URL.Path+" "+r.Header.Get("Depth")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusMultiStatus)
			fmt.Fprintf(w, `<?xml version="1.0"?><D:multistatus xmlns:D="DAV:">%s</D:multistatus>`, body)
		case http.MethodGet, http.MethodHead:
			data, ok := content[r.URL.Path]
			if !ok {
				http.NotFound(w, r)
				return
			}
			if headNoLength {
				// No Content-Length (chunked), no ranges: no size at all.
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush() // chunked: no Content-Length
				if r.Method == http.MethodGet {
					io.WriteString(w, data)
				}
				return
			}
			http.ServeContent(w, r, "x", time.Time{}, strings.NewReader(data))
		default:
			http.Error(w, "no", http.StatusMethodNotAllowed)
		}
	})
}

// davEntry is one PROPFIND response; length < 0 leaves getcontentlength out.
func davEntry(href string, dir bool, length int) string {
	rt := "<D:resourcetype/>"
	if dir {
		rt = "<D:resourcetype><D:collection/></D:resourcetype>"
	}
	l := ""
	if length >= 0 {
		l = fmt.Sprintf("<D:getcontentlength>%d</D:getcontentlength>", length)
	}
	return fmt.Sprintf(`<D:response><D:href>%s</D:href><D:propstat><D:prop>%s%s</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>`, href, rt, l)
}

// 3. A PROPFIND without getcontentlength means an unknown size, not an
// empty file: the download learns it from its first GET, and refuses when
// no size is known at all.
func TestRegressListingWithoutLength(t *testing.T) {
	body := strings.Repeat("x", 1000)
	props := map[string]string{
		"/f 0":  davEntry("/f", false, -1),
		"/d/ 0": davEntry("/d/", true, -1),
		"/d/ 1": davEntry("/d/", true, -1) + davEntry("/d/f", false, -1),
	}
	content := map[string]string{"/f": body, "/d/f": body}
	c := newFaultClient(t)
	ctx := context.Background()

	base := davServer(t, props, content, false)
	in, err := c.Stat(ctx, base+"/f")
	if err != nil || in.Size != -1 {
		t.Errorf("Stat: %+v, %v; want size -1 (unknown)", in, err)
	}
	dst := filepath.Join(t.TempDir(), "f")
	if _, err := copySingle(t, c, base+"/f", dst, client.CopyOptions{Checksum: "auto"}); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "file listed without length", mustReadFile(t, dst), []byte(body))
	out := filepath.Join(t.TempDir(), "out")
	if _, err := c.Copy(ctx, []string{base + "/d/"}, out, client.CopyOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "tree file listed without length", mustReadFile(t, filepath.Join(out, "f")), []byte(body))

	// No size anywhere (neither GET nor HEAD gives a Content-Length):
	// refused, nothing left behind.
	noLen := davServer(t, props, content, true)
	dst = filepath.Join(t.TempDir(), "f")
	if _, err := copySingle(t, c, noLen+"/f", dst, client.CopyOptions{Checksum: "auto"}); err == nil {
		t.Fatal("a file of unknown size was downloaded")
	}
	part, state := partFilesOf(dst)
	if pathExists(dst) || pathExists(part) || pathExists(state) {
		t.Error("a refused download left files")
	}
}

// 4. wanda cat (Client.Get) over a retry that finds another version of the
// file fails with ErrSourceChanged instead of splicing the two.
func TestRegressGetNoSplice(t *testing.T) {
	o := startOrigin(t)
	const size = 4 << 20
	v1, v2 := seededBytes(size, 105), seededBytes(size, 106)
	o.put(t, "g", v1)
	fr := startFront(t, o.URL)
	fr.add(faultRule{Method: http.MethodGet, Times: 1, Kind: faultDrop, At: 1 << 20},
		faultRule{Method: http.MethodGet, Times: 1, Kind: faultPass, Hook: func(*http.Request) { o.replace(t, "g", v2) }})
	var buf bytes.Buffer
	n, err := newFaultClient(t).Get(context.Background(), fr.URL+"/data/g", &buf, "")
	if !errors.Is(err, client.ErrSourceChanged) {
		t.Errorf("Get over a changed file: %d bytes, %v; want ErrSourceChanged", n, err)
	}
	if got := buf.Bytes(); !bytes.HasPrefix(v1, got) {
		t.Errorf("Get wrote %d bytes that are not a prefix of the first version", len(got))
	}
}

// 5. cp -r of a local tree copies symbolic links to files as files, and
// reports (as failed entries, not silently) links to directories,
// dangling links and files that are not regular.
func TestRegressTreeSymlinks(t *testing.T) {
	o := startOrigin(t)
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{tree, filepath.Join(dir, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(filepath.Join(dir, "real"), "hello")
	mustWrite(filepath.Join(tree, "a"), "a")
	for link, target := range map[string]string{
		"link": filepath.Join(dir, "real"), "dirlink": filepath.Join(dir, "sub"), "dangling": filepath.Join(dir, "gone"),
	} {
		if err := os.Symlink(target, filepath.Join(tree, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := newFaultClient(t).Copy(ctx, []string{tree}, o.URL+"/data/up/", client.CopyOptions{Recursive: true})
	if err == nil || !strings.Contains(err.Error(), "3 of 5 files failed") {
		t.Errorf("Copy: %v; want 3 of 5 files failed", err)
	}
	want := map[string]string{"a": "", "link": "", "dirlink": "directory", "dangling": "dangling", "fifo": "named pipe"}
	for _, r := range rs {
		name := filepath.Base(r.Src)
		w, ok := want[name]
		if !ok {
			t.Errorf("unexpected result %+v", r)
			continue
		}
		delete(want, name)
		if (w == "") != (r.Error == "") || !strings.Contains(r.Error, w) {
			t.Errorf("%s: error %q, want one saying %q", name, r.Error, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("no result for %v", want)
	}
	if got := string(o.read(t, "up/tree/link")); got != "hello" {
		t.Errorf("the link to a file was copied as %q, want its target's content", got)
	}
	if got := dirEntries(t, filepath.Join(o.Dir, "up", "tree")); !slices.Equal(got, []string{"a", "link"}) {
		t.Errorf("remote tree %v, want [a link]", got)
	}

	// A source that is itself a link to a directory is that directory.
	if err := os.Symlink(filepath.Join(dir, "sub"), filepath.Join(dir, "sublink")); err != nil {
		t.Fatal(err)
	}
	mustWrite(filepath.Join(dir, "sub", "s"), "s")
	rs, err = newFaultClient(t).Copy(ctx, []string{filepath.Join(dir, "sublink")}, o.URL+"/data/up/", client.CopyOptions{Recursive: true})
	if err != nil || len(rs) != 1 {
		t.Fatalf("cp -r of a link to a directory: %d results, %v", len(rs), err)
	}
	if got := string(o.read(t, "up/sublink/s")); got != "s" {
		t.Errorf("up/sublink/s is %q", got)
	}
}

// 6. A root:// alternate (no transport here) is skipped; the http one
// after it is used.
func TestRegressRootAlternateSkipped(t *testing.T) {
	data := seededBytes(1<<20, 107)
	o, fr, src := originAndFront(t, "f", data)
	good := startFront(t, o.URL)
	link := http.Header{"Link": {
		"<root://127.0.0.5:1094//data/f>; rel=duplicate; pri=1",
		"<" + good.URL + "/data/f>; rel=duplicate; pri=2",
	}}
	fr.add(faultRule{Method: http.MethodGet, Kind: faultStatus, Status: http.StatusBadGateway, Header: link},
		faultRule{Kind: faultPass, Header: link})
	dst := filepath.Join(t.TempDir(), "f")
	res, err := copySingle(t, newFaultClient(t), src, dst, client.CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
	if res.Server != good.Host {
		t.Errorf("served by %q, want the http alternate %s", res.Server, good.Host)
	}
}

// 7. A server that ignores Range: parallel streams do not each read the
// file from byte 0; the file is transferred again in one GET.
func TestRegressNoRangesOneStream(t *testing.T) {
	const size = 24 << 20
	data := seededBytes(size, 108)
	_, fr, src := originAndFront(t, "nr", data)
	fr.NoRange.Store(true)
	dst := filepath.Join(t.TempDir(), "nr")
	c := newFaultClient(t)
	res, err := copySingle(t, c, src, dst, client.CopyOptions{Streams: 8, ChunkMin: 1 << 20, ChunkMax: 1 << 20, Checksum: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
	if res.Streams != 1 || !res.Verified {
		t.Errorf("result %+v: want 1 stream in the end, verified", res)
	}
	// The refused streams' answers fill socket buffers before they are
	// closed; skipping would have cost about 12 times the file.
	served := fr.Served.Load()
	t.Logf("served %d MiB for a %d MiB file", served>>20, size>>20)
	if served > 4*size {
		t.Errorf("the front served %d MiB for a %d MiB file", served>>20, size>>20)
	}
	// A read far into the file is refused rather than skipped to.
	_, err = c.Get(context.Background(), src, io.Discard, fmt.Sprintf("%d-", 4<<20))
	if !errors.Is(err, client.ErrNoRanges) {
		t.Errorf("ranged Get from a server without ranges: %v, want ErrNoRanges", err)
	}
	if cl := client.Classify(fmt.Errorf("x: %w", client.ErrNoRanges)); cl != client.Fatal {
		t.Errorf("ErrNoRanges is classified %v, want Fatal", cl)
	}
}

// 8. --continue resumes only a part file of the same source URL, never
// the bytes of another file of the same size.
func TestRegressResumeOtherSource(t *testing.T) {
	const size = 4 << 20
	a, b := make([]byte, size), make([]byte, size)
	// Same size, no validators, and the same tail (zeros) where the
	// resume checks the bytes it keeps.
	copy(a, seededBytes(size/2, 109))
	copy(b, seededBytes(size/2, 110))
	// The first run is interrupted at 3 MiB for certain: its GET sends
	// 3 MiB, then holds the answer until the client gives up on it.
	const cut = 3 << 20
	var held atomic.Bool
	base := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		var d []byte
		switch r.URL.Path {
		case "/run1/f":
			d = a
		case "/run2/f":
			d = b
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method == "PROPFIND" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/run1/f" && r.Method == http.MethodGet && held.CompareAndSwap(false, true) {
			w = &holdAfterWriter{ResponseWriter: w, left: cut, done: r.Context().Done()}
		}
		http.ServeContent(w, r, "f", time.Time{}, bytes.NewReader(d))
	})
	c := newFaultClient(t)
	dst := filepath.Join(t.TempDir(), "f")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Copy(ctx, []string{base + "/run1/f"}, dst, client.CopyOptions{Streams: 1, Checksum: "auto", Progress: &cancelAfter{at: cut, cancel: cancel}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted copy: %v", err)
	}
	_, state := partFilesOf(dst)
	var st struct {
		Source string `json:"source"`
	}
	if err := json.Unmarshal(mustReadFile(t, state), &st); err != nil || st.Source != base+"/run1/f" {
		t.Errorf("state record source %q (%v), want %s", st.Source, err, base+"/run1/f")
	}
	res, err := copySingle(t, c, base+"/run2/f", dst, client.CopyOptions{Continue: true, Checksum: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), b)
	if res.Resumed != 0 {
		t.Errorf("result %+v: resumed bytes of another file", res)
	}
}

// holdAfterWriter passes left body bytes, flushes them, and then holds
// the answer (writes block) until done: a transfer interrupted at a known
// point, whatever the machine's speed.
type holdAfterWriter struct {
	http.ResponseWriter
	left int64
	done <-chan struct{}
}

func (w *holdAfterWriter) Write(p []byte) (int, error) {
	var n int
	if w.left > 0 {
		m, err := w.ResponseWriter.Write(p[:min(int64(len(p)), w.left)])
		n, w.left = m, w.left-int64(m)
		if err != nil || w.left > 0 {
			return n, err
		}
		if err := http.NewResponseController(w.ResponseWriter).Flush(); err != nil {
			return n, err
		}
	}
	<-w.done
	return n, errors.New("answer held until the client went away")
}

// 9. Parallel streams sharing a cached route with alternates (from the
// redirector and from the answers) do not race (run with -race).
func TestRegressAlternatesNoRace(t *testing.T) {
	const size = 32 << 20
	data := seededBytes(size, 111)
	_, fr, _ := originAndFront(t, "r", data)
	fr.add(faultRule{Method: http.MethodGet, Kind: faultPass, Header: http.Header{"Link": {"<http://127.0.0.9:1/data/r>; rel=duplicate; pri=9"}}})
	red := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 2; i <= 4; i++ {
			w.Header().Add("Link", fmt.Sprintf("<http://127.0.0.%d:1/data/r>; rel=duplicate; pri=%d", i, i))
		}
		http.Redirect(w, r, fr.URL+r.URL.Path, http.StatusFound)
	})
	dst := filepath.Join(t.TempDir(), "r")
	if _, err := copySingle(t, newFaultClient(t), red+"/data/r", dst, client.CopyOptions{Streams: 8, ChunkMin: 1 << 20, ChunkMax: 1 << 20, Checksum: "none"}); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
}

// 10. A listing is the collection's entries wherever the server puts the
// collection itself in its answer; a file lists itself.
func TestRegressListSelfAnywhere(t *testing.T) {
	self := davEntry("/d/", true, 0)
	a, b := davEntry("/d/a", false, 1), davEntry("/d/b%20c", false, 1)
	for name, body := range map[string]string{"last": a + b + self, "middle": a + self + b, "unslashed": a + b + davEntry("/d", true, 0)} {
		t.Run(name, func(t *testing.T) {
			props := map[string]string{"/d/ 0": self, "/d/ 1": body, "/d/a 1": a}
			base := davServer(t, props, map[string]string{"/d/a": "z", "/d/b c": "z"}, false)
			c := newFaultClient(t)
			ctx := context.Background()
			infos, err := c.List(ctx, base+"/d/")
			var names []string
			for _, in := range infos {
				names = append(names, in.Name)
			}
			if err != nil || !slices.Equal(names, []string{"a", "b c"}) {
				t.Errorf("List: %v, %v; want [a b c]", names, err)
			}
			infos, err = c.List(ctx, base+"/d/a")
			if err != nil || len(infos) != 1 || infos[0].Name != "a" {
				t.Errorf("List of a file: %+v, %v; want the file itself", infos, err)
			}
			out := filepath.Join(t.TempDir(), "out")
			rs, err := c.Copy(ctx, []string{base + "/d/"}, out, client.CopyOptions{Recursive: true})
			if err != nil || len(rs) != 2 {
				t.Fatalf("Copy: %d results, %v; want 2", len(rs), err)
			}
			if got := dirEntries(t, out); !slices.Equal(got, []string{"a", "b c"}) {
				t.Errorf("copied tree %v, want [a b c]", got)
			}
		})
	}
}

// 11. A no-replace upload whose answer is lost: the retry is refused
// (412, the file exists now), and the engine checks by checksum that the
// file there is the one it sent.
func TestRegressNoReplaceAnswerLost(t *testing.T) {
	o := startOrigin(t)
	data := seededBytes(100_000, 112)
	front, lost := lostAnswerFront(t, o.URL, func(r *http.Request, status int) bool {
		return r.Method == http.MethodPut && status/100 == 2
	})
	res, err := copySingle(t, newFaultClient(t), writeLocal(t, "h", data), front+"/data/h", client.CopyOptions{NoReplace: true, Checksum: "auto"})
	if !lost.Load() {
		t.Fatal("no answer was lost: the test did not test")
	}
	if err != nil {
		t.Fatalf("no-replace upload whose answer was lost: %v", err)
	}
	mustEqualBytes(t, "uploaded file", o.read(t, "h"), data)
	if !res.Verified {
		t.Errorf("result %+v: want verified (the file there was checked)", res)
	}
}

// 12. cp -r (and cp of a file into dir/) to a remote directory below
// missing directories creates them.
func TestRegressNestedRemoteDestination(t *testing.T) {
	o := startOrigin(t)
	tree := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newFaultClient(t)
	ctx := context.Background()
	if _, err := c.Copy(ctx, []string{tree}, o.URL+"/data/x/y/", client.CopyOptions{Recursive: true}); err != nil {
		t.Errorf("cp -r into a missing nested directory: %v", err)
	} else if got := string(o.read(t, "x/y/tree/a")); got != "a" {
		t.Errorf("x/y/tree/a is %q", got)
	}
	if _, err := c.Copy(ctx, []string{filepath.Join(tree, "a")}, o.URL+"/data/p/q/", client.CopyOptions{}); err != nil {
		t.Errorf("cp of a file into a missing nested directory: %v", err)
	} else if got := string(o.read(t, "p/q/a")); got != "a" {
		t.Errorf("p/q/a is %q", got)
	}
}

// 13. An upload to a server that ignores Digest (stores whatever comes)
// is not reported verified.
func TestRegressUploadDigestIgnored(t *testing.T) {
	var mu sync.Mutex
	files := map[string][]byte{}
	base := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			mu.Lock()
			files[r.URL.Path] = b
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet, http.MethodHead:
			mu.Lock()
			b, ok := files[r.URL.Path]
			mu.Unlock()
			if !ok {
				http.NotFound(w, r)
				return
			}
			http.ServeContent(w, r, "f", time.Time{}, bytes.NewReader(b))
		default:
			http.Error(w, "no", http.StatusMethodNotAllowed)
		}
	})
	data := seededBytes(100_000, 113)
	res, err := copySingle(t, newFaultClient(t), writeLocal(t, "u", data), base+"/u", client.CopyOptions{Checksum: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	mustEqualBytes(t, "stored file", files["/u"], data)
	mu.Unlock()
	if res.Verified {
		t.Errorf("result %+v: a server that ignores Digest verified nothing", res)
	}
}

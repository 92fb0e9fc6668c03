package xrdclient

import (
	"bytes"
	"context"
	"errors"
	"hash/adler32"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// Tests against real servers (XRootD's own, wanda's): the engine with
// this transport registered, as `wanda cp root://...` uses it.

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newClient(t *testing.T) (*client.Client, *Transport) {
	t.Helper()
	c := client.New()
	c.Policy.Backoff = 10 * time.Millisecond
	c.Policy.Stall = 20 * time.Second
	tr := Register(c)
	t.Cleanup(tr.CloseIdle)
	return c, tr
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestDownload(t *testing.T) { forPeers(t, testDownload) }

func testDownload(t *testing.T, p peer) {
	c, tr := newClient(t)
	ctx := testCtx(t)
	data := randomBytes(37<<20+12345, 1)
	p.writeFile(t, "/data/f", data)
	for _, streams := range []int{1, 4} {
		dst := filepath.Join(t.TempDir(), "f")
		res, err := c.Copy(ctx, []string{p.URL("/data/f")}, dst, client.CopyOptions{Streams: streams, Checksum: "adler32", ChunkMin: 4 << 20, ChunkMax: 8 << 20})
		if err != nil {
			t.Fatalf("streams %d: %v", streams, err)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("streams %d: %d bytes differ from the %d on the server", streams, len(got), len(data))
		}
		if !res[0].Verified || res[0].Retries != 0 || res[0].Streams != streams {
			t.Errorf("streams %d: result %+v, want verified, no retries", streams, res[0])
		}
		if n := tr.readers.Load(); n != 0 {
			t.Errorf("streams %d: %d readers still counted open (their share of ReadMemory would shrink the others' chunks)", streams, n)
		}
	}
}

func TestUploadAndReadBack(t *testing.T) { forPeers(t, testUploadAndReadBack) }

func testUploadAndReadBack(t *testing.T, p peer) {
	c, _ := newClient(t)
	ctx := testCtx(t)
	data := randomBytes(21<<20+7, 2)
	src := filepath.Join(t.TempDir(), "up")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	u := p.URL("/data/sub/dir/up")
	res, err := c.Copy(ctx, []string{src}, u, client.CopyOptions{Checksum: "adler32"})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Verified {
		t.Errorf("upload not verified: %+v", res[0])
	}
	onDisk, err := os.ReadFile(p.Path("/data/sub/dir/up"))
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("stored file: %d bytes, err %v; want the %d uploaded", len(onDisk), err, len(data))
	}
	back := filepath.Join(t.TempDir(), "back")
	if _, err := c.Copy(ctx, []string{u}, back, client.CopyOptions{Streams: 3, Checksum: "adler32"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("read back bytes differ")
	}

	// Replacing is the default; NoReplace refuses.
	small := []byte("replaced")
	if err := os.WriteFile(src, small, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Copy(ctx, []string{src}, u, client.CopyOptions{Checksum: "adler32"}); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if got, _ := os.ReadFile(p.Path("/data/sub/dir/up")); !bytes.Equal(got, small) {
		t.Fatalf("after replace: %q", got)
	}
	_, err = c.Copy(ctx, []string{src}, u, client.CopyOptions{NoReplace: true})
	if !errors.Is(err, client.ErrExist) {
		t.Fatalf("no-replace upload over an existing file: %v, want ErrExist", err)
	}

	// An empty file.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Copy(ctx, []string{empty}, p.URL("/data/empty"), client.CopyOptions{Checksum: "adler32"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p.Path("/data/empty")); err != nil || fi.Size() != 0 {
		t.Fatalf("empty upload: %v %v", fi, err)
	}
}

func TestUploadChecksumMismatch(t *testing.T) { forPeers(t, testUploadChecksumMismatch) }

func testUploadChecksumMismatch(t *testing.T, p peer) {
	_, tr := newClient(t)
	ctx := testCtx(t)
	data := []byte("some bytes whose checksum is not the one given")
	u, _ := url.Parse(p.URL("/data/bad"))
	body := func() (rc readCloser, err error) { return nopCloser{bytes.NewReader(data)}, nil }
	err := tr.Write(ctx, u, bodyFunc(body), int64(len(data)), client.WriteOptions{Checksums: map[string][]byte{"adler32": {1, 2, 3, 4}}})
	if !errors.Is(err, client.ErrChecksum) {
		t.Fatalf("got %v, want a checksum mismatch", err)
	}
	if _, err := os.Stat(p.Path("/data/bad")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mismatched upload was left on the server: %v", err)
	}
}

func TestNamespace(t *testing.T) { forPeers(t, testNamespace) }

func testNamespace(t *testing.T, p peer) {
	c, _ := newClient(t)
	ctx := testCtx(t)
	p.writeFile(t, "/data/dir/a", []byte("aaaa"))
	p.writeFile(t, "/data/dir/b", randomBytes(5000, 3))

	in, err := c.Stat(ctx, p.URL("/data/dir/b"))
	if err != nil {
		t.Fatal(err)
	}
	want := adler32.Checksum(randomBytes(5000, 3))
	if in.Size != 5000 || in.IsDir || in.Name != "b" || in.ModTime.IsZero() {
		t.Errorf("stat b: %+v", in)
	}
	if s := in.Sums["adler32"]; len(s) != 4 || uint32(s[0])<<24|uint32(s[1])<<16|uint32(s[2])<<8|uint32(s[3]) != want {
		t.Errorf("stat b: adler32 %x, want %08x", s, want)
	}
	if in, err := c.Stat(ctx, p.URL("/data/dir")); err != nil || !in.IsDir {
		t.Errorf("stat dir: %+v %v", in, err)
	}

	if err := c.Mkdir(ctx, p.URL("/data/dir/sub"), false); err != nil {
		t.Fatal(err)
	}
	// XRootD answers kXR_mkdir of an existing directory with success.
	if err := c.Mkdir(ctx, p.URL("/data/dir/sub"), false); err != nil && !errors.Is(err, client.ErrExist) {
		t.Errorf("mkdir of an existing directory: %v, want nil or ErrExist", err)
	}
	if err := c.Mkdir(ctx, p.URL("/data/x/y/z"), true); err != nil {
		t.Fatalf("mkdir -p: %v", err)
	}
	if fi, err := os.Stat(p.Path("/data/x/y/z")); err != nil || !fi.IsDir() {
		t.Fatalf("mkdir -p: %v %v", fi, err)
	}

	ls, err := c.List(ctx, p.URL("/data/dir"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Name < ls[j].Name })
	if len(ls) != 3 || ls[0].Name != "a" || ls[0].Size != 4 || ls[1].Name != "b" || ls[1].Size != 5000 || ls[2].Name != "sub" || !ls[2].IsDir {
		t.Fatalf("list: %+v", ls)
	}
	if ls[0].URL != p.URL("/data/dir/a") {
		t.Errorf("entry URL %q, want %q", ls[0].URL, p.URL("/data/dir/a"))
	}
	if ls, err := c.List(ctx, p.URL("/data/dir/a")); err != nil || len(ls) != 1 || ls[0].Size != 4 {
		t.Errorf("list of a file: %+v %v", ls, err)
	}

	if err := c.Remove(ctx, p.URL("/data/dir/a"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Path("/data/dir/a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a still there: %v", err)
	}
	if err := c.Remove(ctx, p.URL("/data/dir/a"), false); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("remove of a missing file: %v", err)
	}
	if err := c.Remove(ctx, p.URL("/data/dir"), true); err != nil {
		t.Fatalf("remove -r: %v", err)
	}
	if _, err := os.Stat(p.Path("/data/dir")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir still there: %v", err)
	}

	sum, err := c.Checksum(ctx, p.URL("/data/x/../x/y/../../dir2"), "adler32")
	if err == nil {
		t.Errorf("checksum of a missing file: %x", sum)
	}
}

func TestNotFound(t *testing.T) { forPeers(t, testNotFound) }

func testNotFound(t *testing.T, p peer) {
	c, _ := newClient(t)
	ctx := testCtx(t)
	start := time.Now()
	res, err := c.Copy(ctx, []string{p.URL("/data/missing")}, filepath.Join(t.TempDir(), "m"), client.CopyOptions{Checksum: "adler32"})
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if len(res) > 0 && res[0].Retries != 0 {
		t.Errorf("a missing file was retried %d times", res[0].Retries)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if _, err := c.Stat(ctx, p.URL("/data/missing")); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stat: %v", err)
	}
}

func TestReadV(t *testing.T) { forPeers(t, testReadV) }

func testReadV(t *testing.T, p peer) {
	c, _ := newClient(t)
	ctx := testCtx(t)
	data := randomBytes(16<<20, 4)
	p.writeFile(t, "/data/v", data)
	f, err := c.Open(ctx, p.URL("/data/v"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(5, 6))
	const n, size = 1024, 4096
	want := make([]client.Range, n)
	dst := make([][]byte, n)
	for i := range want {
		want[i] = client.Range{Off: r.Int64N(int64(len(data) - size)), Len: size}
		dst[i] = make([]byte, size)
	}
	if err := f.ReadV(ctx, want, dst); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if !bytes.Equal(dst[i], data[w.Off:w.Off+w.Len]) {
			t.Fatalf("segment %d (%d+%d) differs", i, w.Off, w.Len)
		}
	}

	// More segments than one request takes, and ranges larger than a
	// segment may be, straight through the transport.
	_, tr := newClient(t)
	u, _ := url.Parse(p.URL("/data/v"))
	want = want[:0]
	dst = dst[:0]
	for i := range 3000 {
		l := int64(100 + i%700)
		want = append(want, client.Range{Off: r.Int64N(int64(len(data)) - l), Len: l})
		dst = append(dst, make([]byte, l))
	}
	want = append(want, client.Range{Off: 1000, Len: 5 << 20})
	dst = append(dst, make([]byte, 5<<20))
	if err := tr.ReadV(ctx, u, want, dst); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if !bytes.Equal(dst[i], data[w.Off:w.Off+w.Len]) {
			t.Fatalf("segment %d (%d+%d) differs", i, w.Off, w.Len)
		}
	}
}

func TestReadRanges(t *testing.T) { forPeers(t, testReadRanges) }

func testReadRanges(t *testing.T, p peer) {
	_, tr := newClient(t)
	tr.opts.ReadChunk = 1 << 20 // several requests in flight per read
	ctx := testCtx(t)
	data := randomBytes(5<<20+3, 7)
	p.writeFile(t, "/data/r", data)
	u, _ := url.Parse(p.URL("/data/r"))
	for _, c := range []struct{ off, n int64 }{{0, -1}, {0, int64(len(data))}, {12345, 3 << 20}, {int64(len(data)) - 10, -1}, {1 << 20, 1}} {
		rc, in, err := tr.Read(ctx, u, c.off, c.n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if in.Size != int64(len(data)) {
			t.Errorf("info size %d", in.Size)
		}
		got, err := readAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		end := int64(len(data))
		if c.n >= 0 {
			end = c.off + c.n
		}
		if !bytes.Equal(got, data[c.off:end]) {
			t.Fatalf("%+v: %d bytes differ", c, len(got))
		}
	}
	// Past the end: the reader ends early.
	rc, _, err := tr.Read(ctx, u, int64(len(data))-100, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = readAll(rc)
	rc.Close()
	if !errors.Is(err, errUnexpectedEOF) {
		t.Fatalf("read past the end: %v, want io.ErrUnexpectedEOF", err)
	}
	// Closing half-way leaves a usable pool.
	rc, _, err = tr.Read(ctx, u, 0, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if _, err := rc.Read(buf); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if _, err := tr.Stat(ctx, u, nil, false); err != nil {
		t.Fatalf("stat after an early close: %v", err)
	}
}

// failingBody yields n bytes, then fails.
type failingBody struct{ n int }

func (f *failingBody) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("the source broke")
	}
	k := min(len(p), f.n)
	clear(p[:k])
	f.n -= k
	return k, nil
}

func (f *failingBody) Close() error { return nil }

// TestUploadFailure: an upload cut short leaves no file behind
// (POSC: the server discards a file whose writer went away unclosed).
func TestUploadFailure(t *testing.T) { forPeers(t, testUploadFailure) }

func testUploadFailure(t *testing.T, p peer) {
	_, tr := newClient(t)
	ctx := testCtx(t)
	u, _ := url.Parse(p.URL("/data/cut"))
	body := func() (io.ReadCloser, error) { return &failingBody{n: 20 << 20}, nil }
	err := tr.Write(ctx, u, body, 64<<20, client.WriteOptions{})
	if err == nil {
		t.Fatal("an upload whose body failed succeeded")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, serr := os.Stat(p.Path("/data/cut"))
		if errors.Is(serr, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the partial upload is still there (upload error %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And the transport is still usable.
	ok := func() (io.ReadCloser, error) { return nopCloser{bytes.NewReader([]byte("fine"))}, nil }
	if err := tr.Write(ctx, u, ok, 4, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

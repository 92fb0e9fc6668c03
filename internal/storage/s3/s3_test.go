package s3_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"hash/adler32"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/s3conn"
	"github.com/wanda-fed/wanda/internal/s3test"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/s3"
	"github.com/wanda-fed/wanda/internal/storage/storagetest"
)

// srv is one MinIO for the package's tests (each test makes its own
// bucket); a MinIO that cannot start fails the tests, never skips them.
var srv *s3test.Server

func TestMain(m *testing.M) { s3test.Main(m, &srv) }

func server(t *testing.T) *s3test.Server { return srv }

func conn(s *s3test.Server) s3conn.Conn {
	return s3conn.Conn{Endpoint: s.Endpoint, Region: s.Region, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
}

func newBackend(t *testing.T, prefix string, mod func(*s3.Options)) (*s3.Backend, string) {
	t.Helper()
	s := server(t)
	bucket := s.Bucket(t)
	o := s3.Options{Conn: conn(s), Bucket: bucket, Prefix: prefix}
	if mod != nil {
		mod(&o)
	}
	b, err := s3.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, bucket
}

func TestConformance(t *testing.T) {
	for name, mod := range map[string]func(*s3.Options){
		"bucket":           nil,
		"prefix":           func(o *s3.Options) { o.Prefix = "some/prefix" },
		"checksumsOnWrite": func(o *s3.Options) { o.OnWrite = []string{"adler32", "md5"} },
	} {
		t.Run(name, func(t *testing.T) {
			storagetest.Run(t, func(t *testing.T) storage.Backend {
				b, bucket := newBackend(t, "", mod)
				t.Cleanup(func() { noUploadsLeft(t, bucket) })
				return b
			})
		})
	}
}

// noUploadsLeft fails if a multipart upload was left behind.
func noUploadsLeft(t *testing.T, bucket string) {
	t.Helper()
	for u := range srv.Client.ListIncompleteUploads(context.Background(), bucket, "", true) {
		if u.Err != nil {
			t.Errorf("listing uploads: %v", u.Err)
			return
		}
		t.Errorf("multipart upload of %q left behind", u.Key)
	}
}

func put(t *testing.T, b storage.Backend, name string, data []byte, size int64) storage.FileInfo {
	t.Helper()
	u, err := b.Create(t.Context(), name, storage.CreateOptions{Size: size, MakeParents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	// In uneven writes, as a front-end's.
	for p := data; len(p) > 0; {
		n := min(len(p), 100_003)
		if _, err := u.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	fi, err := u.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func readAll(t *testing.T, b storage.Backend, name string, chunk int) []byte {
	t.Helper()
	f, err := b.Open(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	out := make([]byte, 0, fi.Size)
	buf := make([]byte, chunk)
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("ReadAt %d: %v", off, err)
		}
	}
}

// TestMultipart uploads objects of several parts, known and unknown
// sizes, with checksums on write, and reads them back sequentially, in
// large parallel reads and at random.
func TestMultipart(t *testing.T) {
	pool := bufpool.New(64 << 20)
	b, bucket := newBackend(t, "pre", func(o *s3.Options) {
		o.OnWrite = []string{"adler32", "md5"}
		o.Buffers = pool
		o.PartSize = 5 << 20
	})
	data := storagetest.RandBytes(1, 23<<20+12345)
	for _, size := range []int64{int64(len(data)), -1} {
		fi := put(t, b, "d/big", data, size)
		if fi.Size != int64(len(data)) {
			t.Errorf("Commit size %d", fi.Size)
		}
		if got := readAll(t, b, "d/big", 1<<20); !bytes.Equal(got, data) {
			t.Fatalf("sequential read differs (size %d)", size)
		}
		if got := readAll(t, b, "d/big", 20<<20); !bytes.Equal(got, data) {
			t.Fatalf("parallel read differs (size %d)", size)
		}
	}
	// The checksums are in the object's metadata, the S3 ETag is not an MD5.
	oi, err := srv.Client.StatObject(t.Context(), bucket, "pre/d/big", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantAdler := binary.BigEndian.AppendUint32(nil, adler32.Checksum(data))
	if got := oi.UserMetadata["Wanda-Adler32"]; got != hexs(wantAdler) {
		t.Errorf("adler32 metadata %q, want %x (metadata %v)", got, wantAdler, oi.UserMetadata)
	}
	sum := md5.Sum(data)
	got, err := b.Checksum(t.Context(), "d/big", "md5")
	if err != nil || !bytes.Equal(got, sum[:]) {
		t.Errorf("Checksum md5 = %x, %v; want %x", got, err, sum)
	}
	// Memory stayed in the budget: PartSize*Concurrency plus a read.
	if st := pool.Stats(); st.High > 64<<20 {
		t.Errorf("buffers peaked at %d bytes", st.High)
	}
	f, err := b.Open(t.Context(), "d/big")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		off := r.Int64N(int64(len(data)))
		buf := make([]byte, r.IntN(3<<20)+1)
		n, err := f.ReadAt(buf, off)
		want := data[off:min(off+int64(len(buf)), int64(len(data)))]
		if n != len(want) || !bytes.Equal(buf[:n], want) || (err != nil && err != io.EOF) {
			t.Fatalf("ReadAt(%d, %d) = %d, %v", len(buf), off, n, err)
		}
	}
}

func hexs(b []byte) string {
	const digits = "0123456789abcdef"
	var s strings.Builder
	for _, c := range b {
		s.WriteByte(digits[c>>4])
		s.WriteByte(digits[c&15])
	}
	return s.String()
}

// TestReplacedWhileRead: an object replaced between reads of an open file
// fails the next read; it never returns the new version's bytes.
func TestReplacedWhileRead(t *testing.T) {
	b, _ := newBackend(t, "", nil)
	v1, v2 := storagetest.RandBytes(1, 3<<20), storagetest.RandBytes(2, 3<<20)
	put(t, b, "f", v1, -1)
	f, err := b.Open(t.Context(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	if _, err := f.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, v1[:1<<20]) {
		t.Fatalf("first read: %v", err)
	}
	// The second read opens a stream to the end, the third reuses it.
	if _, err := f.ReadAt(buf, 1<<20); err != nil || !bytes.Equal(buf, v1[1<<20:2<<20]) {
		t.Fatalf("second read: %v", err)
	}
	put(t, b, "f", v2, -1)
	for _, off := range []int64{0, 100} {
		n, err := f.ReadAt(buf, off)
		if !errors.Is(err, storage.ErrConflict) {
			t.Errorf("ReadAt(%d) after the replacement = %d, %v; want ErrConflict", off, n, err)
		}
	}
	if got := readAll(t, b, "f", 1<<20); !bytes.Equal(got, v2) {
		t.Error("a new Open does not read the new version")
	}
}

// TestAbortedUploadInvisible: a multipart upload aborted mid-way, or
// abandoned and swept, leaves no object and no upload.
func TestAbortedUploadInvisible(t *testing.T) {
	b, bucket := newBackend(t, "pre", func(o *s3.Options) { o.PartSize = 5 << 20 })
	u, err := b.Create(t.Context(), "partial", storage.CreateOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(storagetest.RandBytes(5, 12<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(t.Context(), "partial"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Stat during the upload: %v", err)
	}
	if err := u.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(t.Context(), "partial"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Stat after Abort: %v", err)
	}
	noUploadsLeft(t, bucket)

	// An upload abandoned (a crashed server never aborts it) is swept;
	// one outside the export's prefix is not.
	core := minio.Core{Client: srv.Client}
	for _, k := range []string{"pre/orphan", "other/upload"} {
		if _, err := core.NewMultipartUpload(t.Context(), bucket, k, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.Sweep(t.Context(), time.Hour); err != nil || n != 0 {
		t.Errorf("Sweep of uploads younger than an hour = %d, %v", n, err)
	}
	if n, err := b.Sweep(t.Context(), 0); err != nil || n != 1 {
		t.Errorf("Sweep = %d, %v; want 1", n, err)
	}
	var left []string
	for u := range srv.Client.ListIncompleteUploads(t.Context(), bucket, "", true) {
		left = append(left, u.Key)
	}
	if !slices.Equal(left, []string{"other/upload"}) {
		t.Errorf("uploads left after the sweep: %q, want only other/upload", left)
	}
}

// TestBadInput: wrong credentials and a missing bucket fail New with
// errors that name no secret.
func TestBadInput(t *testing.T) {
	s := server(t)
	bucket := s.Bucket(t)
	c := conn(s)
	c.SecretKey = "wrong-secret-key-value"
	_, err := s3.New(t.Context(), s3.Options{Conn: c, Bucket: bucket})
	if err == nil {
		t.Fatal("New with a wrong secret succeeded")
	}
	if strings.Contains(err.Error(), c.SecretKey) || strings.Contains(err.Error(), s.SecretKey) {
		t.Errorf("error shows a secret: %v", err)
	}
	_, err = s3.New(t.Context(), s3.Options{Conn: conn(s), Bucket: "no-such-bucket"})
	if !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("New of a missing bucket: %v", err)
	}
}

// TestForeignLayout: keys written by other tools (no markers) list as
// documented. (An object and a prefix of one name cannot be made on
// MinIO, which refuses them; AWS allows them.)
func TestForeignLayout(t *testing.T) {
	b, bucket := newBackend(t, "", nil)
	for _, k := range []string{"a", "x/y/z"} {
		if _, err := srv.Client.PutObject(t.Context(), bucket, k, strings.NewReader(k), int64(len(k)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fis, err := b.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(fis) != 2 || fis[0].Name != "a" || fis[0].IsDir || fis[1].Name != "x" || !fis[1].IsDir {
		t.Errorf("List(root) = %+v", fis)
	}
	if fi, err := b.Stat(t.Context(), "x/y"); err != nil || !fi.IsDir {
		t.Errorf("Stat(x/y) = %+v, %v", fi, err)
	}
	if _, err := b.List(t.Context(), "a"); !errors.Is(err, storage.ErrNotDir) {
		t.Errorf("List(a) = %v, want ErrNotDir", err)
	}
	// Removing x/y/z keeps x/y, as a POSIX directory would stay.
	if err := b.Remove(t.Context(), "x/y/z"); err != nil {
		t.Fatal(err)
	}
	if fi, err := b.Stat(t.Context(), "x/y"); err != nil || !fi.IsDir {
		t.Errorf("Stat(x/y) after removing its file = %+v, %v", fi, err)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, bucket, prefix string }{
		{"s3://b", "b", ""},
		{"s3://b/", "b", ""},
		{"s3://b/p/q/", "b", "p/q"},
	} {
		bk, p, err := s3.ParseURL(tc.in)
		if err != nil || bk != tc.bucket || p != tc.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v", tc.in, bk, p, err)
		}
	}
	for _, bad := range []string{"http://b/p", "s3://", "s3:///p", "s3://b/../x"} {
		if _, _, err := s3.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) succeeded", bad)
		}
	}
}

// countingTransport counts the GET requests it carries.
type countingTransport struct {
	gets atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "" {
		c.gets.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestVectorFill: a multi-range read of 200 small spans goes upstream in
// at most 8 GETs, and the bytes are right.
func TestVectorFill(t *testing.T) {
	ct := &countingTransport{}
	b, _ := newBackend(t, "", func(o *s3.Options) { o.Conn.Transport = ct })
	data := storagetest.RandBytes(8, 6<<20)
	put(t, b, "v", data, -1)
	f, err := b.Open(t.Context(), "v")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 2))
	spans := make([]storage.Span, 200)
	for i := range spans {
		spans[i] = storage.Span{Off: r.Int64N(int64(len(data)) - 5000), Len: r.Int64N(4000) + 1}
	}
	before := ct.gets.Load()
	if err := f.(storage.Filler).Fill(t.Context(), spans); err != nil {
		t.Fatal(err)
	}
	for _, s := range spans {
		buf := make([]byte, s.Len)
		if n, err := f.ReadAt(buf, s.Off); n != len(buf) || err != nil || !bytes.Equal(buf, data[s.Off:s.Off+s.Len]) {
			t.Fatalf("ReadAt(%d, %d) = %d, %v", s.Len, s.Off, n, err)
		}
	}
	if n := ct.gets.Load() - before; n < 1 || n > 8 {
		t.Errorf("%d GETs for 200 spans, want 1 to 8", n)
	}
}

// TestValidators: Stat, List and an open file describe an object alike
// (the front-ends' ETags come from them), and a replacement of the same
// size in the same second changes the description.
func TestValidators(t *testing.T) {
	b, _ := newBackend(t, "", nil)
	put(t, b, "d/f", []byte("version 1"), -1)
	st, err := b.Stat(t.Context(), "d/f")
	if err != nil {
		t.Fatal(err)
	}
	fis, err := b.List(t.Context(), "d")
	if err != nil || len(fis) != 1 {
		t.Fatalf("List = %+v, %v", fis, err)
	}
	if l := fis[0]; l.Inode != st.Inode || !l.ModTime.Equal(st.ModTime) || l.Size != st.Size || st.Inode == 0 {
		t.Errorf("List says %+v, Stat %+v", l, st)
	}
	f, err := b.Open(t.Context(), "d/f")
	if err != nil {
		t.Fatal(err)
	}
	ofi, _ := f.Stat()
	f.Close()
	if ofi.Inode != st.Inode || !ofi.ModTime.Equal(st.ModTime) {
		t.Errorf("File.Stat %+v, Stat %+v", ofi, st)
	}
	put(t, b, "d/f", []byte("version 2"), -1)
	st2, err := b.Stat(t.Context(), "d/f")
	if err != nil || st2.Inode == st.Inode {
		t.Errorf("after a replacement of the same size: %+v, %v (before %+v)", st2, err, st)
	}
}

// stallingTransport answers GETs of objects with bodies that stop after
// 100 KiB until closed.
type stallingTransport struct{ on atomic.Bool }

func (s *stallingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && s.on.Load() && r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "" {
		resp.Body = &stallingBody{rc: resp.Body, left: 100 << 10, closed: make(chan struct{})}
	}
	return resp, err
}

type stallingBody struct {
	rc     io.ReadCloser
	left   int
	once   sync.Once
	closed chan struct{}
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		<-b.closed
		return 0, errors.New("closed while stalled")
	}
	n, err := b.rc.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

func (b *stallingBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.rc.Close()
}

// TestStall: an S3 server that stops sending in the middle of a body
// fails the read with ErrUpstreamTimeout after StallTimeout, instead of
// holding it forever.
func TestStall(t *testing.T) {
	st := &stallingTransport{}
	b, _ := newBackend(t, "", func(o *s3.Options) { o.Conn.Transport = st; o.StallTimeout = 300 * time.Millisecond })
	data := storagetest.RandBytes(4, 1<<20)
	put(t, b, "f", data, -1)
	f, err := b.Open(t.Context(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st.on.Store(true)
	start := time.Now()
	_, err = f.ReadAt(make([]byte, len(data)), 0)
	if !errors.Is(err, storage.ErrUpstreamTimeout) {
		t.Errorf("ReadAt from a stalled server: %v, want ErrUpstreamTimeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the stalled read took %v", d)
	}
}

// TestIdleStreamClosed: a sequential read's GET that no read continues is
// closed after IdleStreamTimeout, so that it holds nothing on the server
// (MinIO would hold back the replacement below until it ended); the next
// read then asks afresh, and finds the replacement.
func TestIdleStreamClosed(t *testing.T) {
	b, _ := newBackend(t, "", func(o *s3.Options) { o.IdleStreamTimeout = 50 * time.Millisecond })
	v1 := storagetest.RandBytes(1, 8<<20)
	put(t, b, "f", v1, -1)
	f, err := b.Open(t.Context(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for _, off := range []int64{0, 1 << 20} { // the second opens a stream to the end
		if _, err := f.ReadAt(buf, off); err != nil || !bytes.Equal(buf, v1[off:off+1<<20]) {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
	}
	start := time.Now()
	put(t, b, "f", storagetest.RandBytes(2, 8<<20), -1)
	t.Logf("the replacement took %v", time.Since(start))
	if _, err := f.ReadAt(buf, 2<<20); !errors.Is(err, storage.ErrConflict) {
		t.Errorf("ReadAt after the idle stream was closed and the object replaced: %v, want ErrConflict", err)
	}
}

// TestCommitInfo: what Commit returns is what Stat then says (the
// front-ends answer a PUT with validators from it), for one PUT and for a
// multipart upload with checksums stored after it.
func TestCommitInfo(t *testing.T) {
	b, _ := newBackend(t, "", func(o *s3.Options) { o.PartSize = 5 << 20; o.OnWrite = []string{"adler32"} })
	for _, n := range []int{10, 11 << 20} {
		fi := put(t, b, "f", storagetest.RandBytes(uint64(n), n), -1)
		st, err := b.Stat(t.Context(), "f")
		if err != nil {
			t.Fatal(err)
		}
		if fi.Inode != st.Inode || !fi.ModTime.Equal(st.ModTime) || fi.Size != st.Size {
			t.Errorf("%d bytes: Commit gave %+v, Stat %+v", n, fi, st)
		}
	}
}

package s3client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/client/s3client"
	"github.com/wanda-fed/wanda/internal/s3conn"
	"github.com/wanda-fed/wanda/internal/s3test"
	"github.com/wanda-fed/wanda/internal/storage/storagetest"
)

// srv is one MinIO for the package; one that cannot start fails the
// tests, it never skips them.
var srv *s3test.Server

func TestMain(m *testing.M) { s3test.Main(m, &srv) }

func newClient(t *testing.T, secret string) *client.Client {
	t.Helper()
	c := client.New()
	c.Policy.Attempts = 2
	s3client.Register(c, s3client.Options{Conn: s3conn.Conn{
		Endpoint: srv.Endpoint, Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: secret,
	}, PartSize: 5 << 20, Concurrency: 3})
	return c
}

// cp up and down through the engine: multipart with parallel parts, the
// adler32 stored as metadata and checked on the way down, ls, stat, rm.
func TestCopyUpDown(t *testing.T) {
	c := newClient(t, srv.SecretKey)
	bucket := srv.Bucket(t)
	dir := t.TempDir()
	ctx := t.Context()
	for _, size := range []int{0, 1000, 17<<20 + 3} {
		data := storagetest.RandBytes(uint64(size), size)
		src := filepath.Join(dir, fmt.Sprintf("src-%d", size))
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := fmt.Sprintf("s3://%s/d/f-%d", bucket, size)
		if _, err := c.CopyFile(ctx, src, dst, client.CopyOptions{Checksum: "auto"}); err != nil {
			t.Fatalf("upload %d bytes: %v", size, err)
		}
		oi, err := srv.Client.StatObject(ctx, bucket, fmt.Sprintf("d/f-%d", size), minio.StatObjectOptions{})
		if err != nil || oi.Size != int64(size) {
			t.Fatalf("object: %+v, %v", oi, err)
		}
		want := fmt.Sprintf("%08x", adler32.Checksum(data))
		if got := oi.UserMetadata["Wanda-Adler32"]; got != want {
			t.Errorf("adler32 metadata %q, want %q", got, want)
		}
		back := filepath.Join(dir, fmt.Sprintf("back-%d", size))
		res, err := c.CopyFile(ctx, dst, back, client.CopyOptions{Checksum: "adler32"})
		if err != nil {
			t.Fatalf("download %d bytes: %v", size, err)
		}
		if !res.Verified {
			t.Errorf("download of %d bytes not verified", size)
		}
		if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
			t.Errorf("downloaded %d bytes differ", size)
		}
		sum, err := c.Checksum(ctx, dst, "adler32")
		if err != nil || !bytes.Equal(sum, binary.BigEndian.AppendUint32(nil, adler32.Checksum(data))) {
			t.Errorf("Checksum = %x, %v", sum, err)
		}
	}
	if err := c.Mkdir(ctx, "s3://"+bucket+"/empty", false); err != nil {
		t.Fatal(err)
	}
	infos, err := c.List(ctx, "s3://"+bucket+"/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range infos {
		names = append(names, fmt.Sprintf("%s:%v", in.Name, in.IsDir))
	}
	if !slices.Equal(names, []string{"d:true", "empty:true"}) {
		t.Errorf("ls of the bucket = %q", names)
	}
	infos, err = c.List(ctx, "s3://"+bucket+"/d")
	if err != nil || len(infos) != 3 {
		t.Errorf("ls d = %+v, %v", infos, err)
	}
	in, err := c.Stat(ctx, "s3://"+bucket+"/d/f-1000")
	if err != nil || in.Size != 1000 || in.IsDir {
		t.Errorf("stat = %+v, %v", in, err)
	}
	if in, err := c.Stat(ctx, "s3://"+bucket+"/d"); err != nil || !in.IsDir {
		t.Errorf("stat of a prefix = %+v, %v", in, err)
	}
	if err := c.Remove(ctx, "s3://"+bucket+"/d/f-1000", false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "s3://"+bucket+"/d/f-1000"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stat after rm: %v", err)
	}
	if err := c.Remove(ctx, "s3://"+bucket+"/empty", true); err != nil {
		t.Errorf("rm of an empty directory: %v", err)
	}
	if _, err := c.Stat(ctx, "s3://"+bucket+"/empty"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stat after rm of the directory: %v", err)
	}
	// No upload was left behind.
	for u := range srv.Client.ListIncompleteUploads(ctx, bucket, "", true) {
		t.Errorf("incomplete upload %q left", u.Key)
	}
}

// Bad input: a missing key or bucket is not found, wrong credentials are
// refused, NoReplace refuses an existing key; none shows the secret.
func TestErrors(t *testing.T) {
	ctx := t.Context()
	c := newClient(t, srv.SecretKey)
	bucket := srv.Bucket(t)
	if _, err := c.Stat(ctx, "s3://"+bucket+"/missing"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stat of a missing key: %v", err)
	}
	if _, err := c.Stat(ctx, "s3://no-such-bucket/x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stat in a missing bucket: %v", err)
	}
	bad := newClient(t, "not-the-secret-at-all")
	_, err := bad.Stat(ctx, "s3://"+bucket+"/x")
	if !errors.Is(err, client.ErrForbidden) {
		t.Errorf("stat with a wrong secret: %v", err)
	}
	if err != nil && (strings.Contains(err.Error(), srv.SecretKey) || strings.Contains(err.Error(), "not-the-secret")) {
		t.Errorf("error shows a secret: %v", err)
	}
	src := filepath.Join(t.TempDir(), "f")
	os.WriteFile(src, []byte("data"), 0o644)
	dst := "s3://" + bucket + "/once"
	if _, err := c.CopyFile(ctx, src, dst, client.CopyOptions{NoReplace: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CopyFile(ctx, src, dst, client.CopyOptions{NoReplace: true}); err == nil {
		t.Error("a second NoReplace upload succeeded")
	}
	// Killed mid-upload (its context ends after 12 MiB of 40 were read):
	// no object and no upload left.
	tr := s3client.New(s3client.Options{Conn: s3conn.Conn{
		Endpoint: srv.Endpoint, Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
	}, PartSize: 5 << 20})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body := func() (io.ReadCloser, error) {
		return io.NopCloser(&cancelAfter{r: bytes.NewReader(storagetest.RandBytes(1, 40<<20)), n: 12 << 20, cancel: cancel}), nil
	}
	u, _ := url.Parse("s3://" + bucket + "/big")
	if err := tr.Write(cctx, u, body, 40<<20, client.WriteOptions{}); err == nil {
		t.Error("a cancelled upload succeeded")
	}
	if _, err := srv.Client.StatObject(ctx, bucket, "big", minio.StatObjectOptions{}); err == nil {
		t.Error("a cancelled upload left an object")
	}
	for u := range srv.Client.ListIncompleteUploads(ctx, bucket, "", true) {
		t.Errorf("incomplete upload %q left", u.Key)
	}
}

// cancelAfter reads r and calls cancel once n bytes were read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	if c.n -= k; c.n <= 0 {
		c.cancel()
	}
	return k, err
}

// A tree up and down with -r: the files listed are fetched without the
// engine taking the listing's validators for a changed source.
func TestTree(t *testing.T) {
	c := newClient(t, srv.SecretKey)
	bucket := srv.Bucket(t)
	ctx := t.Context()
	src := t.TempDir()
	files := map[string][]byte{"a/one": []byte("one"), "a/b/two": []byte("two"), "big": storagetest.RandBytes(3, 12<<20)}
	for name, data := range files {
		p := filepath.Join(src, "tree", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Copy(ctx, []string{filepath.Join(src, "tree")}, "s3://"+bucket+"/up/", client.CopyOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	res, err := c.Copy(ctx, []string{"s3://" + bucket + "/up/tree"}, filepath.Join(dst, "back"), client.CopyOptions{Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Retries > 0 || r.Error != "" {
			t.Errorf("%s: %d retries, %q", r.Src, r.Retries, r.Error)
		}
	}
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(dst, "back", name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
	}
}

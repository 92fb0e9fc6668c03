// Package s3client is the client engine's transport for s3://BUCKET/KEY
// URLs: one S3 request per call (the engine retries, fails over, resumes
// and verifies), over minio-go's low-level calls. The server, region and
// credentials come from s3conn.Conn: flags, then the AWS environment
// (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)
// and ~/.aws/credentials.
//
// Keys are paths: "dir/" is a directory when keys lie under it or its
// marker object (an empty "dir/") exists, as wanda's S3 exports have them
// (internal/storage/s3). Write sends a file as a multipart upload of
// Concurrency parts in parallel (one PUT up to one part), invisible until
// it completes and aborted when it fails; it holds at most Concurrency
// part buffers. Each part goes with its Content-MD5, which the server
// checks before it accepts the part. The checksums the engine computed of the file are stored
// with it as x-amz-meta-wanda-ALG metadata, which Stat returns.
package s3client

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/s3conn"
)

// Options configure a Transport.
type Options struct {
	Conn s3conn.Conn
	// PartSize of multipart uploads (default 8 MiB; larger when a file
	// would need more than 10000 parts).
	PartSize int
	// Concurrency is the parts of one upload in flight (default 4).
	Concurrency int
}

// Transport speaks S3. Safe for concurrent use.
type Transport struct {
	opts Options

	once sync.Once
	c    *minio.Client
	core minio.Core
	err  error
}

var _ client.Transport = (*Transport)(nil)

// New returns a transport; it connects at its first use.
func New(o Options) *Transport {
	if o.PartSize <= 0 {
		o.PartSize = 8 << 20
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	return &Transport{opts: o}
}

// Register makes t c's s3:// transport.
func Register(c *client.Client, o Options) *Transport {
	t := New(o)
	c.Register("s3", t)
	return t
}

func (t *Transport) client() (*minio.Client, error) {
	t.once.Do(func() {
		t.c, t.err = s3conn.NewClient(t.opts.Conn)
		t.core = minio.Core{Client: t.c}
	})
	return t.c, t.err
}

// target splits s3://BUCKET/KEY.
func (t *Transport) target(u *url.URL) (bucket, key string, err error) {
	if _, err := t.client(); err != nil {
		return "", "", err
	}
	if u.Scheme != "s3" || u.Host == "" {
		return "", "", fmt.Errorf("%s: want s3://BUCKET/KEY", client.Redact(u))
	}
	return u.Host, strings.TrimPrefix(u.Path, "/"), nil
}

const metaPrefix = "wanda-"

func sums(meta map[string]string) map[string][]byte {
	var out map[string][]byte
	for k, v := range meta {
		k = strings.ToLower(strings.TrimPrefix(strings.ToLower(k), "x-amz-meta-"))
		alg, ok := strings.CutPrefix(k, metaPrefix)
		if !ok {
			continue
		}
		if b, err := hex.DecodeString(v); err == nil {
			if out == nil {
				out = map[string][]byte{}
			}
			out[alg] = b
		}
	}
	return out
}

// objInfo describes an object alike from a listing and from HEAD or GET
// (the engine compares them to notice a changed source): the ETag without
// the quotes listings keep, the time cut to the second HEAD gives.
func objInfo(bucket, key string, oi minio.ObjectInfo) client.Info {
	return client.Info{
		Name:    key[strings.LastIndexByte(key, '/')+1:],
		URL:     "s3://" + bucket + "/" + key,
		Size:    oi.Size,
		ModTime: oi.LastModified.Truncate(time.Second),
		ETag:    strings.Trim(oi.ETag, `"`),
		Sums:    sums(oi.UserMetadata),
		// Every S3 server serves ranges.
		ByteRanges: true,
	}
}

// mapErr turns an S3 error into one the engine classifies.
func mapErr(u *url.URL, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var er minio.ErrorResponse
	if !errors.As(err, &er) {
		return fmt.Errorf("%s: %w", client.Redact(u), err)
	}
	msg := er.Code
	if er.Message != "" {
		msg += ": " + er.Message
	}
	kind := s3conn.Classify(er)
	switch kind {
	case s3conn.NotFound:
		return fmt.Errorf("%s: %w (%s)", client.Redact(u), client.ErrNotFound, msg)
	case s3conn.Denied:
		return fmt.Errorf("%s: %w (%s)", client.Redact(u), client.ErrForbidden, msg)
	}
	code := er.StatusCode
	if code == 0 {
		code = http.StatusBadGateway
	}
	se := &client.StatusError{Method: "S3", URL: client.Redact(u), Code: code, Msg: msg}
	if kind == s3conn.Overloaded {
		se.RetryAfter = time.Second
	}
	return se
}

// Stat heads the object; a key that is none but has keys under it is a
// directory.
func (t *Transport) Stat(ctx context.Context, u *url.URL, want []string, dir bool) (client.Info, error) {
	bucket, key, err := t.target(u)
	if err != nil {
		return client.Info{}, err
	}
	key = strings.TrimSuffix(key, "/")
	if key != "" {
		oi, err := t.c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		if err == nil {
			return objInfo(bucket, key, oi), nil
		}
		if err = mapErr(u, err); !errors.Is(err, client.ErrNotFound) {
			return client.Info{}, err
		}
	}
	res, err := t.core.ListObjectsV2(bucket, dirPrefix(key), "", "", "/", 1)
	if err != nil {
		return client.Info{}, mapErr(u, err)
	}
	if key != "" && len(res.Contents) == 0 && len(res.CommonPrefixes) == 0 {
		return client.Info{}, fmt.Errorf("%s: %w", client.Redact(u), client.ErrNotFound)
	}
	name := key[strings.LastIndexByte(key, '/')+1:]
	return client.Info{Name: name, URL: "s3://" + bucket + "/" + key, IsDir: true}, nil
}

func dirPrefix(key string) string {
	if key == "" {
		return ""
	}
	return key + "/"
}

// List lists a directory from its prefix and the delimiter "/"; an
// object lists itself.
func (t *Transport) List(ctx context.Context, u *url.URL) ([]client.Info, error) {
	bucket, key, err := t.target(u)
	if err != nil {
		return nil, err
	}
	key = strings.TrimSuffix(key, "/")
	p := dirPrefix(key)
	var out []client.Info
	found := false
	token := ""
	for {
		res, err := t.core.ListObjectsV2(bucket, p, "", token, "/", 1000)
		if err != nil {
			return nil, mapErr(u, err)
		}
		for _, o := range res.Contents {
			found = true
			if o.Key == p {
				continue
			}
			out = append(out, objInfo(bucket, o.Key, o))
		}
		for _, cp := range res.CommonPrefixes {
			found = true
			k := strings.TrimSuffix(cp.Prefix, "/")
			out = append(out, client.Info{Name: k[len(p):], URL: "s3://" + bucket + "/" + k, IsDir: true})
		}
		if !res.IsTruncated || res.NextContinuationToken == "" {
			break
		}
		token = res.NextContinuationToken
	}
	if !found && key != "" {
		in, err := t.Stat(ctx, u, nil, false)
		if err != nil {
			return nil, err
		}
		return []client.Info{in}, nil
	}
	slices.SortFunc(out, func(a, b client.Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Read is one GET, ranged unless it asks for the whole object.
func (t *Transport) Read(ctx context.Context, u *url.URL, off, n int64, want []string) (io.ReadCloser, client.Info, error) {
	bucket, key, err := t.target(u)
	if err != nil {
		return nil, client.Info{}, err
	}
	if n == 0 {
		in, err := t.Stat(ctx, u, want, false)
		return io.NopCloser(strings.NewReader("")), in, err
	}
	var o minio.GetObjectOptions
	switch {
	case n > 0:
		err = o.SetRange(off, off+n-1)
	case off > 0:
		err = o.SetRange(off, 0)
	}
	if err != nil {
		return nil, client.Info{}, err
	}
	body, oi, h, err := t.core.GetObject(ctx, bucket, key, o)
	if err != nil {
		return nil, client.Info{}, mapErr(u, err)
	}
	in := objInfo(bucket, key, oi)
	if cr := h.Get("Content-Range"); cr != "" {
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			if size, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
				in.Size = size
			}
		}
	}
	return body, in, nil
}

// ReadV reads each range with its own ranged GET, a few at a time.
func (t *Transport) ReadV(ctx context.Context, u *url.URL, want []client.Range, dst [][]byte) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(t.opts.Concurrency)
	for i, r := range want {
		g.Go(func() error {
			body, _, err := t.Read(gctx, u, r.Off, r.Len, nil)
			if err != nil {
				return err
			}
			defer body.Close()
			if _, err := io.ReadFull(body, dst[i]); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return fmt.Errorf("%s: %w", client.Redact(u), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// Mkdir writes the directory's marker.
func (t *Transport) Mkdir(ctx context.Context, u *url.URL) error {
	bucket, key, err := t.target(u)
	if err != nil {
		return err
	}
	key = strings.TrimSuffix(key, "/")
	if key == "" {
		return fmt.Errorf("%s: %w", client.Redact(u), client.ErrExist)
	}
	_, err = t.c.PutObject(ctx, bucket, key+"/", strings.NewReader(""), 0, minio.PutObjectOptions{DisableMultipart: true})
	return mapErr(u, err)
}

// Remove deletes an object, or a directory's marker when nothing else is
// under it.
func (t *Transport) Remove(ctx context.Context, u *url.URL) error {
	bucket, key, err := t.target(u)
	if err != nil {
		return err
	}
	in, err := t.Stat(ctx, u, nil, false)
	if err != nil {
		return err
	}
	key = strings.TrimSuffix(key, "/")
	if in.IsDir {
		res, err := t.core.ListObjectsV2(bucket, key+"/", "", "", "", 2)
		if err != nil {
			return mapErr(u, err)
		}
		if len(res.Contents) != 1 || res.Contents[0].Key != key+"/" {
			return fmt.Errorf("%s: directory not empty", client.Redact(u))
		}
		key += "/"
	}
	return mapErr(u, t.c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}))
}

// Checksum reads the object back and computes its checksum: the
// metadata a wanda upload stores (and Stat returns, for verifying
// downloads) was computed by the uploader, so it proves nothing about the
// stored bytes. S3 computes none of wanda's algorithms, and its ETag is no
// MD5 for a multipart upload.
func (t *Transport) Checksum(ctx context.Context, u *url.URL, alg string) ([]byte, error) {
	h, err := checksum.New(alg)
	if err != nil {
		return nil, err
	}
	body, _, err := t.Read(ctx, u, 0, -1, nil)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	if err := checksum.Feed(ctx, h, body); err != nil {
		return nil, fmt.Errorf("%s: %w", client.Redact(u), err)
	}
	return h.Sum(nil), nil
}

// Write uploads size bytes from body: one PUT up to one part, else a
// multipart upload with Concurrency parts in flight.
func (t *Transport) Write(ctx context.Context, u *url.URL, body client.BodyFunc, size int64, o client.WriteOptions) error {
	bucket, key, err := t.target(u)
	if err != nil {
		return err
	}
	if key == "" || strings.HasSuffix(key, "/") {
		return fmt.Errorf("%s: %w", client.Redact(u), client.ErrIsDir)
	}
	r, err := body()
	if err != nil {
		return err
	}
	defer r.Close()
	var po minio.PutObjectOptions
	if len(o.Checksums) > 0 {
		po.UserMetadata = map[string]string{}
		for alg, s := range o.Checksums {
			po.UserMetadata[metaPrefix+alg] = hex.EncodeToString(s)
		}
	}
	if o.NoReplace {
		po.SetMatchETagExcept("*")
	}
	part := t.opts.PartSize
	if size > 0 {
		part = max(part, int((size+maxParts-1)/maxParts))
	}
	up := &multipart{t: t, u: u, bucket: bucket, key: key, part: part, opts: po}
	info, err := up.run(ctx, r, size)
	if err != nil {
		var se *client.StatusError
		if o.NoReplace && errors.As(err, &se) && se.Code == http.StatusPreconditionFailed {
			return fmt.Errorf("%s: %w", client.Redact(u), client.ErrExist)
		}
		return err
	}
	if o.Stored != nil {
		// No Sums: S3 checked each part's Content-MD5, none of the
		// engine's digests.
		o.Stored(objInfo(bucket, key, minio.ObjectInfo{Size: info.Size, ETag: info.ETag, LastModified: info.LastModified}))
	}
	return nil
}

// maxParts is S3's limit of parts in one upload.
const maxParts = 10000

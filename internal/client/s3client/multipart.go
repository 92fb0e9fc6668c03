package s3client

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/client"
)

// multipart is one upload: parts read from the body into at most
// Concurrency buffers, each sent while the next fills.
type multipart struct {
	t           *Transport
	u           *url.URL
	bucket, key string
	part        int
	opts        minio.PutObjectOptions

	mu   sync.Mutex
	done []minio.CompletePart
}

// run sends r (size bytes, or -1 for unknown) and returns what S3 said of
// the object. A failed multipart upload is aborted.
func (m *multipart) run(ctx context.Context, r io.Reader, size int64) (minio.UploadInfo, error) {
	first := make([]byte, m.part)
	n, err := io.ReadFull(r, first)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return minio.UploadInfo{}, fmt.Errorf("reading the source: %w", err)
	}
	if n < m.part { // one part: one PUT
		if size >= 0 && int64(n) != size {
			return minio.UploadInfo{}, fmt.Errorf("%s: the source gave %d of %d bytes: %w", client.Redact(m.u), n, size, io.ErrUnexpectedEOF)
		}
		po := m.opts
		po.DisableContentSha256 = true
		info, err := m.t.core.PutObject(ctx, m.bucket, m.key, bytes.NewReader(first[:n]), int64(n), md5b64(first[:n]), "", po)
		if err != nil {
			return info, fmt.Errorf("%w", mapErr(m.u, err))
		}
		info.Size = int64(n)
		return info, nil
	}
	id, err := m.t.core.NewMultipartUpload(ctx, m.bucket, m.key, minio.PutObjectOptions{UserMetadata: m.opts.UserMetadata})
	if err != nil {
		return minio.UploadInfo{}, mapErr(m.u, err)
	}
	info, err := m.parts(ctx, id, first, r, size)
	if err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		m.t.core.AbortMultipartUpload(actx, m.bucket, m.key, id)
		cancel()
		return info, err
	}
	return info, nil
}

func (m *multipart) parts(ctx context.Context, id string, first []byte, r io.Reader, size int64) (minio.UploadInfo, error) {
	conc := m.t.opts.Concurrency
	free := make(chan []byte, conc)
	free <- first
	for range conc - 1 {
		free <- nil // allocated when first needed
	}
	g, gctx := errgroup.WithContext(ctx)
	num := 0
	eof := false
	var total int64
	for !eof {
		var buf []byte
		select {
		case buf = <-free:
		case <-gctx.Done():
			return minio.UploadInfo{}, g.Wait()
		}
		var n int
		if num == 0 {
			n = len(first)
		} else {
			if buf == nil {
				buf = make([]byte, m.part)
			}
			var err error
			n, err = io.ReadFull(r, buf)
			switch {
			case err == io.EOF || err == io.ErrUnexpectedEOF:
				eof = true
			case err != nil:
				g.Wait()
				return minio.UploadInfo{}, fmt.Errorf("reading the source: %w", err)
			}
			if n == 0 {
				free <- buf
				break
			}
		}
		num++
		if num > maxParts {
			g.Wait()
			return minio.UploadInfo{}, fmt.Errorf("%s: more than %d parts of %d bytes", client.Redact(m.u), maxParts, m.part)
		}
		total += int64(n)
		pn, data := num, buf[:n]
		g.Go(func() error {
			defer func() { free <- data[:cap(data)] }()
			p, err := m.t.core.PutObjectPart(gctx, m.bucket, m.key, id, pn, bytes.NewReader(data), int64(len(data)),
				minio.PutObjectPartOptions{DisableContentSha256: true, Md5Base64: md5b64(data)})
			if err != nil {
				return mapErr(m.u, err)
			}
			m.mu.Lock()
			m.done = append(m.done, minio.CompletePart{PartNumber: pn, ETag: p.ETag})
			m.mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return minio.UploadInfo{}, err
	}
	if size >= 0 && total != size {
		return minio.UploadInfo{}, fmt.Errorf("%s: the source gave %d of %d bytes: %w", client.Redact(m.u), total, size, io.ErrUnexpectedEOF)
	}
	slices.SortFunc(m.done, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	var co minio.PutObjectOptions
	if m.opts.Header().Get("If-None-Match") != "" {
		co.SetMatchETagExcept("*")
	}
	info, err := m.t.core.CompleteMultipartUpload(ctx, m.bucket, m.key, id, m.done, co)
	if err != nil {
		return info, mapErr(m.u, err)
	}
	info.Size = total
	return info, nil
}

// md5b64 is the Content-MD5 of data, which S3 checks before it stores it.
func md5b64(data []byte) string {
	s := md5.Sum(data)
	return base64.StdEncoding.EncodeToString(s[:])
}

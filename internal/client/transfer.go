package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// Checksum asks the server for u's checksum (HEAD with Want-Digest).
func (c *Client) Checksum(ctx context.Context, u, alg string) ([]byte, error) {
	alg = checksum.Canonical(alg)
	if alg == "" {
		return nil, fmt.Errorf("unknown checksum algorithm (known: %s)", strings.Join(checksum.Names, ", "))
	}
	resp, err := c.do(ctx, http.MethodHead, u, nil, http.Header{"Want-Digest": {alg}})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	sums, err := checksum.ParseDigest(resp.Header.Get("Digest"))
	if err != nil {
		return nil, fmt.Errorf("HEAD %s: %w", u, err)
	}
	sum, ok := sums[alg]
	if !ok {
		return nil, fmt.Errorf("HEAD %s: server gave no %s checksum", u, alg)
	}
	return sum, nil
}

// Get writes u (or the byte range "a-b", "a-", "-n" of it) to w and returns
// the byte count. A short body is an error, never a silent truncation.
func (c *Client) Get(ctx context.Context, u string, w io.Writer, byteRange string) (int64, error) {
	hdr := http.Header{}
	if byteRange != "" {
		hdr.Set("Range", "bytes="+byteRange)
	}
	resp, err := c.do(ctx, http.MethodGet, u, nil, hdr)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if byteRange != "" && resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("GET %s: asked for bytes %s, server answered %d", u, byteRange, resp.StatusCode)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: after %d bytes: %w", u, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("GET %s: got %d of %d bytes", u, n, resp.ContentLength)
	}
	return n, nil
}

// Download copies u to the local file dest through a temporary file in the
// same directory, verifies the adler32 checksum when the server offers one,
// and renames into place: an interrupted download never leaves a file that
// looks complete.
func (c *Client) Download(ctx context.Context, u, dest string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".part-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	resp, err := c.do(ctx, http.MethodGet, u, nil, http.Header{"Want-Digest": {"adler32"}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := checksum.NewMulti([]string{checksum.Adler32})
	n, err := io.Copy(io.MultiWriter(tmp, sum), resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: after %d bytes: %w", u, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("GET %s: got %d of %d bytes", u, n, resp.ContentLength)
	}
	if d := resp.Header.Get("Digest"); d != "" {
		want, err := checksum.ParseDigest(d)
		if err == nil && want[checksum.Adler32] != nil {
			got := sum.Sums()[checksum.Adler32]
			if !bytes.Equal(got, want[checksum.Adler32]) {
				return n, fmt.Errorf("GET %s: adler32 mismatch: server %s, received %s", u, checksum.Hex(want[checksum.Adler32]), checksum.Hex(got))
			}
		}
	}
	if err := tmp.Sync(); err != nil {
		return n, err
	}
	if err := tmp.Close(); err != nil {
		return n, err
	}
	return n, os.Rename(tmp.Name(), dest)
}

// Upload sends the local file src to u with its adler32 in a Digest header,
// so the server verifies the bytes end to end and stores nothing on a
// mismatch. noReplace refuses to overwrite (If-None-Match: *).
func (c *Client) Upload(ctx context.Context, src, u string, noReplace bool) (int64, error) {
	f, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if fi.IsDir() {
		return 0, fmt.Errorf("%s is a directory", src)
	}
	sum, err := checksum.Compute(ctx, checksum.Adler32, f)
	if err != nil {
		return 0, fmt.Errorf("checksum %s: %w", src, err)
	}
	hdr := http.Header{
		"Digest":       {checksum.DigestValue(checksum.Adler32, sum)},
		"Content-Type": {"application/octet-stream"},
	}
	if noReplace {
		hdr.Set("If-None-Match", "*")
	}
	body := io.NewSectionReader(f, 0, fi.Size())
	resp, err := c.do(ctx, http.MethodPut, u, body, hdr)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return fi.Size(), nil
}

package s3

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/storage"
)

// Sending a large range socket to socket.
//
// A front-end sending a range of an object to its client would read it
// into a buffer and write it out: two copies through user space per byte
// (the S3 server's socket in, the client's socket out), most of the
// server's CPU on a large read. When the endpoint is plain HTTP and the
// front-end's writer reaches a TCP connection (an HTTP/1 response, a
// root:// frame), SendRange instead sends the ranged GETs on connections
// of its own and hands each response body to the writer's ReadFrom as an
// *io.LimitedReader over that *net.TCPConn, which the Go runtime moves
// with splice(2) without it entering user space. net/http's client cannot
// do this (its response body is a reader of its own over a buffered
// connection), so the request is written and the response head parsed
// with net/http's own Request.Write and ReadResponse, and only the body is
// taken from the socket; connections are kept per open file between GETs.
// The request is a presigned URL (minio-go signs it; it is a credential
// and never logged) with Range and If-Match headers: the same version
// pinning as every other read of the file. TLS endpoints (no splice
// through TLS) and proxies keep the buffered path.

// spliceMin is the smallest range sent by splice: below it the request
// costs more than the copies it saves, and ReadAt's streams are reused.
const spliceMin = 1 << 20

// spliceChunk is how many bytes one splice call may move before the stall
// deadline is set again: a GET that moves fewer in StallTimeout fails.
const spliceChunk = 4 << 20

// maxIdleRaw connections are kept per open file between its spliced GETs.
const maxIdleRaw = 4

var _ storage.RangeSender = (*file)(nil)

// CanSend reports whether SendRange takes n bytes (to a writer with
// ReadFrom): an http:// endpoint without a proxy, n at least spliceMin.
func (f *file) CanSend(n int64) bool { return f.b.splice && n >= spliceMin }

// SendRange sends [off, off+n) of the object to w by splice, in GETs of at
// most streamWindow bytes (as ReadAt's streams: a GET holds MinIO's lock
// on the object, which a replacement waits for), one after the other on
// one connection. handled is false, and nothing sent, when it cannot (see
// CanSend, and an answer without a plain body).
func (f *file) SendRange(ctx context.Context, w io.Writer, off, n int64) (sent int64, handled bool, err error) {
	rf, ok := w.(io.ReaderFrom)
	if !ok || !f.CanSend(n) || off < 0 || off+n > f.oi.Size {
		return 0, false, nil
	}
	s := &splicer{f: f}
	defer s.release()
	rt := f.b.wrapRaw(s)
	for sent < n {
		k := min(streamWindow, n-sent)
		b, err := f.rawGet(ctx, rt, off+sent, k)
		if errors.Is(err, errNoSplice) {
			if sent == 0 {
				return 0, false, nil
			}
			err = fmt.Errorf("read %q: %w: S3 answered without a plain body", f.name, storage.ErrUpstream)
		}
		if err != nil {
			return sent, true, err
		}
		m, err := f.spliceBody(ctx, rf, w, b, k)
		sent += m
		if err != nil {
			b.conn.Close()
			return sent, true, err
		}
		s.keep(b)
	}
	return sent, true, nil
}

// spliceBody sends the n bytes of b's body to w: what the head's read
// buffered first, then the rest from the socket by rf (splice).
func (f *file) spliceBody(ctx context.Context, rf io.ReaderFrom, w io.Writer, b *rawBody, n int64) (int64, error) {
	stop := context.AfterFunc(ctx, func() { b.conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			b.close = true // its deadline is spoiled: not reused
		}
	}()
	var sent int64
	if k := b.br.Buffered(); k > 0 {
		head, _ := b.br.Peek(int(min(int64(k), n)))
		m, err := w.Write(head)
		b.br.Discard(m)
		if sent += int64(m); err != nil {
			return sent, err
		}
	}
	for sent < n {
		k := min(spliceChunk, n-sent)
		b.conn.SetReadDeadline(time.Now().Add(f.b.stall))
		m, err := rf.ReadFrom(&io.LimitedReader{R: b.conn, N: k})
		sent += m
		switch {
		case ctx.Err() != nil:
			return sent, ctx.Err()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return sent, fmt.Errorf("read %q: %w: no answer from S3 in %v", f.name, storage.ErrUpstreamTimeout, f.b.stall)
		case err != nil:
			return sent, err
		case m < k:
			return sent, fmt.Errorf("read %q: %w: the object ended early (replaced while read?)", f.name, storage.ErrConflict)
		}
	}
	b.conn.SetReadDeadline(time.Time{})
	return sent, nil
}

// errNoSplice: this GET cannot be spliced (the server answered without a
// plain Content-Length body); nothing was sent.
var errNoSplice = errors.New("s3: not spliceable")

// rawGet sends a GET of [off, off+n) of the pinned version through rt (a
// splicer, under the export's metrics) and checks its answer: the body
// follows on b.conn, its first bytes already in b.br.
func (f *file) rawGet(ctx context.Context, rt http.RoundTripper, off, n int64) (*rawBody, error) {
	u, err := f.b.c.PresignedGetObject(ctx, f.b.bucket, f.key, 15*time.Minute, nil)
	if err != nil {
		return nil, opErr("read", f.name, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, opErr("read", f.name, err)
	}
	req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10))
	req.Header.Set("If-Match", `"`+f.oi.ETag+`"`)
	req.Header.Set("User-Agent", "wanda")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, fmt.Errorf("read %q: %w: no answer from S3 in %v", f.name, storage.ErrUpstreamTimeout, f.b.stall)
		}
		return nil, fmt.Errorf("read %q: %w: %w", f.name, storage.ErrUpstream, err)
	}
	b, ok := resp.Body.(*rawBody)
	if !ok { // a wrapper replaced the body
		resp.Body.Close()
		return nil, errNoSplice
	}
	b.conn.SetReadDeadline(time.Now().Add(f.b.stall))
	fail := func(err error) (*rawBody, error) {
		b.conn.Close()
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed || resp.StatusCode == http.StatusNotFound:
		return fail(fmt.Errorf("read %q: %w: the object was replaced or removed since it was opened", f.name, storage.ErrConflict))
	case resp.StatusCode != http.StatusPartialContent && !(resp.StatusCode == http.StatusOK && off == 0 && n == f.oi.Size):
		return fail(f.statusErr(resp))
	case resp.ContentLength != n || len(resp.TransferEncoding) > 0 || b.br.Buffered() > int(n):
		return fail(errNoSplice)
	}
	return b, nil
}

// rawBody is a response body still on its connection.
type rawBody struct {
	io.ReadCloser // net/http's reader of the body, for error answers
	conn          *net.TCPConn
	br            *bufio.Reader
	close         bool // the server closes the connection after it
}

func (b *rawBody) Close() error { return b.conn.Close() }

// rawConn is a connection between two GETs.
type rawConn struct {
	conn *net.TCPConn
	br   *bufio.Reader
}

// splicer is the http.RoundTripper of one SendRange: one request at a
// time, on a connection the file kept from an earlier GET or a new one,
// leaving the answer's body on the socket (the response's Body is a
// *rawBody).
type splicer struct {
	f    *file
	idle *rawConn
}

func (s *splicer) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	if s.idle == nil {
		s.idle = s.f.takeRaw()
	}
	if c := s.idle; c != nil {
		s.idle = nil
		resp, err := s.exchange(req, c)
		if err == nil || req.Context().Err() != nil {
			return resp, err
		}
		// Closed by the server while it was idle: once more on a new one.
	}
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(req.Context(), "tcp", hostPort(req))
	if err != nil {
		return nil, err
	}
	conn, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return nil, errNoSplice
	}
	return s.exchange(req, &rawConn{conn: conn, br: bufio.NewReaderSize(conn, 16<<10)})
}

// exchange writes req on c and reads the answer's head (closing c when
// that fails).
func (s *splicer) exchange(req *http.Request, c *rawConn) (*http.Response, error) {
	c.conn.SetDeadline(time.Now().Add(s.f.b.stall))
	stop := context.AfterFunc(req.Context(), func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	err := req.Write(c.conn)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(c.br, req)
	}
	if err != nil {
		c.conn.Close()
		return nil, err
	}
	c.conn.SetDeadline(time.Time{})
	resp.Body = &rawBody{ReadCloser: resp.Body, conn: c.conn, br: c.br, close: resp.Close}
	return resp, nil
}

// keep holds b's connection, read to the end of its body, for the next
// GET.
func (s *splicer) keep(b *rawBody) {
	if b.close || b.br.Buffered() > 0 {
		b.conn.Close()
		return
	}
	s.idle = &rawConn{conn: b.conn, br: b.br}
}

// release gives the connection kept back to the file.
func (s *splicer) release() {
	if s.idle != nil {
		s.f.putRaw(s.idle)
		s.idle = nil
	}
}

func hostPort(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// takeRaw returns a connection the file kept, or nil.
func (f *file) takeRaw() *rawConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.raw); n > 0 {
		c := f.raw[n-1]
		f.raw = f.raw[:n-1]
		return c
	}
	return nil
}

// putRaw keeps c for the file's next spliced GET (closed with the file).
func (f *file) putRaw(c *rawConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.raw) == maxIdleRaw {
		c.conn.Close()
		return
	}
	f.raw = append(f.raw, c)
}

// statusErr maps an S3 error answer (its XML Code) as mapErr does.
func (f *file) statusErr(resp *http.Response) error {
	er := minio.ErrorResponse{StatusCode: resp.StatusCode}
	_ = xml.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&er)
	if er.Code == "" {
		er.Code = http.StatusText(resp.StatusCode)
	}
	return fmt.Errorf("read %q: %w", f.name, mapErr(er))
}

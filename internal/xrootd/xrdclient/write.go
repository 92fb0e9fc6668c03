package xrdclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// cleanupTimeout bounds the removal of a partial upload after a failure
// (its own context: the upload's may be the one that ended).
const cleanupTimeout = 10 * time.Second

// Write uploads size bytes from body to u: kXR_open (kXR_new, or
// kXR_delete to replace, with kXR_mkpath), kXR_write
// chunks with WriteAhead in flight, kXR_close. With o.Checksums the
// server's checksum of the stored file (kXR_query) is compared after the
// close: a mismatch removes the file and answers *client.ChecksumError.
//
// XRootD has no atomic publish: a reader may see the file while it grows,
// and a failed upload is removed afterwards (best effort: should this
// process die mid-way, the partial file stays).
func (t *Transport) Write(ctx context.Context, u *url.URL, body client.BodyFunc, size int64, o client.WriteOptions) error {
	ti, err := target(u)
	if err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("kXR_write %s: upload of unknown size", client.Redact(u))
	}
	opts := xrootd.OpenUpdate | xrootd.OpenMkpath | xrootd.OpenDelete
	if o.NoReplace {
		opts = xrootd.OpenUpdate | xrootd.OpenMkpath | xrootd.OpenNew
	}
	c, unbind, or, err := t.openWrite(ctx, ti, opts)
	if err != nil {
		return err
	}
	err = t.send(ctx, c, or.Handle, body, size)
	var le *localError
	if errors.As(err, &le) && !c.broken {
		// Our side failed (the body): the connection is sound, so the
		// file is closed and removed on it, at once.
		_, cerr := c.call(ctx, xrootd.ReqClose, xrootd.HandleBody(or.Handle), nil)
		if cerr == nil {
			_, cerr = c.call(ctx, xrootd.ReqRm, [16]byte{}, []byte(ti.path))
		}
		if cerr != nil {
			c.broken = true
			t.release(c, unbind)
			t.discard(ctx, ti)
		} else {
			t.release(c, unbind)
		}
		return le.err
	}
	if err == nil {
		_, err = c.call(ctx, xrootd.ReqClose, xrootd.HandleBody(or.Handle), nil)
		err = annotate(err, "kXR_close", ti)
	} else {
		err = annotate(err, "kXR_write", ti)
	}
	if err != nil {
		// Answers may still be on the way: the connection goes, and the
		// server closes the file when it sees it go.
		c.broken = true
		t.release(c, unbind)
		t.discard(ctx, ti)
		return err
	}
	t.release(c, unbind)
	return t.verify(ctx, ti, size, o)
}

// localError is a failure of the upload's body (our side), after which
// the connection is still in step with the server.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// openWrite opens ti for writing. POSC (persist on successful close) is
// not asked for: XRootD holds a POSC file whose writer went away for its
// owner to come back (ofs.persist hold, 10 minutes by default), so that
// the engine's retry of a failed upload would be refused (kXR_FileLocked)
// all that time. A failed upload is removed instead (discard).
func (t *Transport) openWrite(ctx context.Context, ti *urlInfo, opts xrootd.OpenOptions) (*conn, func(), xrootd.OpenResponse, error) {
	// XRootD refuses to open a file for writing while readers have it
	// open (kXR_FileLocked): ours let go of it first.
	t.releaseHeld(ctx, ti)
	return t.open(ctx, ti, opts, xrootd.ModeFromPerm(0o644))
}

// send writes the body in kXR_write chunks, reading the acknowledgements
// of earlier chunks while later ones are sent (WriteAhead in flight).
func (t *Transport) send(ctx context.Context, c *conn, h xrootd.Handle, body client.BodyFunc, size int64) error {
	rc, err := body()
	if err != nil {
		return &localError{err}
	}
	defer rc.Close()
	buf := make([]byte, min(int64(t.opts.WriteChunk), max(size, 1)))
	var inflight []xrootd.StreamID
	// local drains the writes in flight and reports a failure of the body.
	local := func(err error) error {
		for len(inflight) > 0 {
			var aerr error
			if inflight, aerr = ack(ctx, c, inflight); aerr != nil {
				c.broken = true
				break
			}
		}
		return &localError{err}
	}
	var off int64
	for off < size {
		n := min(int64(len(buf)), size-off)
		m, err := io.ReadFull(rc, buf[:n])
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("upload body ended at %d of %d bytes: %w", off+int64(m), size, io.ErrUnexpectedEOF)
			}
			return local(err)
		}
		body := xrootd.WriteRequest{Handle: h, Offset: off}.Body()
		sid, err := c.send(ctx, xrootd.ReqWrite, body, buf[:m])
		if err != nil {
			return err
		}
		inflight = append(inflight, sid)
		off += int64(m)
		for len(inflight) >= t.opts.WriteAhead {
			if inflight, err = ack(ctx, c, inflight); err != nil {
				return err
			}
		}
	}
	var one [1]byte
	if n, _ := rc.Read(one[:]); n > 0 {
		return local(fmt.Errorf("upload body longer than the %d bytes announced", size))
	}
	for len(inflight) > 0 {
		if inflight, err = ack(ctx, c, inflight); err != nil {
			return err
		}
	}
	return nil
}

// ack reads one acknowledgement of a write in flight and returns those
// still in flight.
func ack(ctx context.Context, c *conn, inflight []xrootd.StreamID) ([]xrootd.StreamID, error) {
	h, err := c.header(ctx)
	if err != nil {
		return inflight, err
	}
	k := slices.Index(inflight, h.StreamID)
	if k < 0 {
		return inflight, c.protoErr("answer for stream %x, no such write in flight", h.StreamID)
	}
	if h.Status != xrootd.StatusOK {
		err := c.rest(ctx, h)
		var w *waitError
		if errors.As(err, &w) {
			// The bytes are gone: the whole upload is tried again.
			err = &retryable{fmt.Errorf("kXR_write: the server asked to wait %v: %s", w.d, w.msg)}
		}
		if err == nil {
			err = c.protoErr("kXR_waitresp to a kXR_write")
		}
		return inflight, err
	}
	if _, err := c.br.Discard(int(h.Dlen)); err != nil {
		return inflight, c.ioErr(ctx, err)
	}
	return slices.Delete(inflight, k, k+1), nil
}

// discard removes what a failed upload left, on a fresh context.
func (t *Transport) discard(ctx context.Context, ti *urlInfo) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := t.do(cctx, ti, xrootd.ReqRm, [16]byte{}, []byte(ti.path)); err != nil && !errors.Is(err, client.ErrNotFound) {
		t.opts.Log.Debug("removing a failed upload", "url", client.Redact(ti.u), "err", err)
	}
}

// verify compares the server's checksum of the stored file with the
// caller's, when both sides have one algorithm in common.
func (t *Transport) verify(ctx context.Context, ti *urlInfo, size int64, o client.WriteOptions) error {
	stored := client.Info{URL: ti.u.String(), Name: lastName(ti), Size: size, ByteRanges: true}
	if len(o.Checksums) > 0 {
		var algs []string
		for _, a := range []string{"adler32", "crc32c", "md5", "sha256"} {
			if _, ok := o.Checksums[a]; ok {
				algs = append(algs, a)
			}
		}
		sums, err := t.sums(ctx, ti, algs)
		if err != nil {
			return err
		}
		for alg, got := range sums {
			if want := o.Checksums[alg]; !bytes.Equal(got, want) {
				t.discard(ctx, ti)
				return &client.ChecksumError{Alg: alg, Want: want, Got: got, Whom: "source", What: "stored at " + ti.addr}
			}
		}
		stored.Sums = sums
	}
	if o.Stored != nil {
		o.Stored(stored)
	}
	return nil
}

func lastName(ti *urlInfo) string { return info(ti, xrootd.StatInfo{}).Name }

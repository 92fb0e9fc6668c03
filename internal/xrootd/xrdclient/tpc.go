package xrdclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// TPCOptions configure ThirdPartyCopy.
type TPCOptions struct {
	// Overwrite replaces an existing destination (kXR_delete, xrdcp
	// --force); without it an existing destination fails the copy with
	// an error matching client.ErrExist.
	Overwrite bool
	// MakeParents creates the destination's missing directories
	// (kXR_mkpath).
	MakeParents bool
	// Progress, when set, is called about every ProgressInterval
	// (default 2.5 s, as xrdcp) with the bytes at the destination so far
	// and the source's size (kXR_stat of the destination's handle).
	Progress         func(done, total int64)
	ProgressInterval time.Duration
	// Checksum, when set ("adler32"...), compares the source's and the
	// destination's checksums after the copy (xrdcp -C ... end2end); a
	// mismatch is a *client.ChecksumError.
	Checksum string
	// TTL asks the source to keep the rendezvous this long (tpc.ttl,
	// whole seconds; the source bounds it); 0: the source's default.
	TTL time.Duration
}

// ThirdPartyCopy copies src to dst, both root:// (or roots://) URLs,
// server to server: the destination pulls the file from the source, as
// `xrdcp --tpc only` makes it do (XrdCl's ThirdPartyCopyJob, described
// in wanda's xrootd/server/tpc.go):
//
//  1. kXR_open of src with tpc.stage=placement: its size, and the data
//     server a redirector sends to; then kXR_close.
//  2. "kXR_query config tpc" of both servers: a digit > 0 says TPC.
//  3. kXR_open of dst for writing with tpc.key (random), tpc.src,
//     tpc.lfn, tpc.stage=copy and oss.asize.
//  4. kXR_sync of dst: the destination starts pulling.
//  5. kXR_open of src with tpc.key and tpc.dst: the rendezvous that lets
//     the destination read src with this client's rights. It stays open
//     until the copy ended.
//  6. kXR_sync of dst again: answered (kXR_waitresp, then kXR_asynresp)
//     when the copy ended; meanwhile kXR_stat of the handle feeds
//     o.Progress.
//  7. kXR_close of both; with o.Checksum, kXR_query checksum of both.
//
// Errors say which side failed and why (the servers' kXR_error texts);
// they match client.ErrNotFound (no source), client.ErrExist
// (destination exists), client.ErrForbidden, client.ErrChecksum.
// Redirects (kXR_redirect) of either open are followed.
func (t *Transport) ThirdPartyCopy(ctx context.Context, src, dst *url.URL, o TPCOptions) error {
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 2500 * time.Millisecond
	}
	if !isRoot(src) || !isRoot(dst) {
		return fmt.Errorf("third-party copy %s to %s: both must be root:// or roots:// URLs", client.Redact(src), client.Redact(dst))
	}
	fail := func(side string, err error) error {
		return fmt.Errorf("third-party copy %s to %s: %s: %w", client.Redact(src), client.Redact(dst), side, err)
	}

	// 1. Where the source is, and its size.
	sti, size, err := t.placement(ctx, src)
	if err != nil {
		return fail("source", err)
	}
	// 2. Can both do it?
	if err := t.canTPC(ctx, sti); err != nil {
		return fail("source", err)
	}
	key, err := tpcKey()
	if err != nil {
		return err
	}
	// 3. The destination, told where to pull from.
	dq := dst.Query() // the rendezvous is ours to set
	for k := range dq {
		if strings.HasPrefix(k, "tpc.") {
			return fail("destination", fmt.Errorf("the URL already has %s", k))
		}
	}
	cgi := "tpc.key=" + key + "&tpc.src=" + sti.addr + "&tpc.lfn=" + strings.SplitN(sti.path, "?", 2)[0] +
		"&tpc.spr=" + sti.u.Scheme + "&tpc.tpr=" + dst.Scheme + "&tpc.dlgon=0&tpc.stage=copy&tpc.str=1&oss.asize=" + strconv.FormatInt(size, 10)
	dc, dunbind, dti, h, err := t.openDest(ctx, dst, cgi, o)
	if err != nil {
		return fail("destination", err)
	}
	closeDst := func() error {
		_, err := dc.call(ctx, xrootd.ReqClose, xrootd.HandleBody(h), nil)
		if err != nil {
			dc.broken = true
		}
		t.release(dc, dunbind)
		return annotateAs(err, "kXR_close", dti, dst)
	}
	// 4. Start the pull.
	if _, err := dc.call(ctx, xrootd.ReqSync, xrootd.HandleBody(h), nil); err != nil {
		closeDst()
		return fail("destination (starting the copy)", annotateAs(err, "kXR_sync", dti, dst))
	}
	// 5. The rendezvous at the source.
	sq := "tpc.key=" + key + "&tpc.dst=" + hostForCGI(dti.u.Hostname()) + "&tpc.stage=copy"
	if o.TTL > 0 {
		sq += "&tpc.ttl=" + strconv.Itoa(int(o.TTL/time.Second))
	}
	rti, err := target(withCGI(sti.u, sq))
	if err != nil {
		closeDst()
		return fail("source", err)
	}
	sc, sunbind, sor, err := t.open(ctx, rti, xrootd.OpenRead, 0)
	if err != nil {
		closeDst()
		return fail("source (rendezvous)", relabel(err, src))
	}
	// 6. Wait for the copy.
	werr := t.waitCopy(ctx, dc, h, size, o)
	t.closeFile(ctx, sc, sunbind, sor.Handle)
	if werr != nil {
		closeDst()
		return fail("the copy", annotateAs(werr, "kXR_sync", dti, dst))
	}
	// 7. Done: the destination's close says whether it stored the file.
	if err := closeDst(); err != nil {
		return fail("destination", err)
	}
	if o.Checksum != "" {
		if err := t.compareSums(ctx, sti.u, dti.u, o.Checksum); err != nil {
			return fail("checksum", err)
		}
	}
	return nil
}

// ServerCopy is client.ServerCopier: `wanda cp --tpc` between root://
// URLs. The destination always pulls (root:// has no push); a server
// that does not do TPC makes it fail with client.ErrTPCUnsupported.
func (t *Transport) ServerCopy(ctx context.Context, src, dst *url.URL, o client.ServerCopyOptions) error {
	err := t.ThirdPartyCopy(ctx, src, dst, TPCOptions{Overwrite: o.Overwrite, MakeParents: true, Progress: o.Progress, Checksum: o.Checksum})
	var xe *Error
	if err != nil && (errors.As(err, &xe) && xe.Code == xrootd.CodeUnsupported || strings.Contains(err.Error(), "does not support third-party copies")) {
		return fmt.Errorf("%w: %w", client.ErrTPCUnsupported, err)
	}
	return err
}

func isRoot(u *url.URL) bool { return u != nil && (u.Scheme == "root" || u.Scheme == "roots") }

// maxTPCRedirects bounds the redirects followed per open.
const maxTPCRedirects = 8

// placement opens src for reading with tpc.stage=placement, following
// redirects, and returns the data server's URL (without that stage) and
// the file's size.
func (t *Transport) placement(ctx context.Context, src *url.URL) (*urlInfo, int64, error) {
	u := src
	for range maxTPCRedirects {
		ti, err := target(withCGI(u, "tpc.stage=placement"))
		if err != nil {
			return nil, 0, err
		}
		c, unbind, or, err := t.open(ctx, ti, xrootd.OpenRead, 0)
		var re *client.RedirectError
		if errors.As(err, &re) {
			u = withoutCGI(re.Location, "tpc.stage")
			continue
		}
		if err != nil {
			return nil, 0, relabel(err, src)
		}
		t.closeFile(ctx, c, unbind, or.Handle)
		st, err := xrootd.ParseStat(or.Stat)
		if err != nil {
			return nil, 0, fmt.Errorf("kXR_open %s: %w", client.Redact(src), err)
		}
		if st.Flags&xrootd.StatIsDir != 0 {
			return nil, 0, fmt.Errorf("%s: %w", client.Redact(src), client.ErrIsDir)
		}
		ti, err = target(u)
		return ti, st.Size, err
	}
	return nil, 0, fmt.Errorf("%s: more than %d redirects", client.Redact(src), maxTPCRedirects)
}

// canTPC asks the server "kXR_query config tpc" (XrdCl's CheckTPC).
func (t *Transport) canTPC(ctx context.Context, ti *urlInfo) error {
	b, err := t.do(ctx, ti, xrootd.ReqQuery, xrootd.QueryRequest{Type: xrootd.QueryConfig}.Body(), []byte("tpc"))
	if err != nil {
		return err
	}
	line, _, _ := strings.Cut(string(bytes.TrimRight(b, "\x00")), "\n")
	if n, err := strconv.Atoi(strings.TrimPrefix(line, "+")); err != nil || n <= 0 {
		return fmt.Errorf("%s does not support third-party copies (kXR_query config tpc: %q)", ti.addr, line)
	}
	return nil
}

// openDest opens dst for the copy, following redirects; the connection
// stays the caller's (the handle lives on it).
func (t *Transport) openDest(ctx context.Context, dst *url.URL, cgi string, o TPCOptions) (*conn, func(), *urlInfo, xrootd.Handle, error) {
	opts := xrootd.OpenUpdate | xrootd.OpenNew
	if o.Overwrite {
		opts = xrootd.OpenUpdate | xrootd.OpenDelete
	}
	if o.MakeParents {
		opts |= xrootd.OpenMkpath
	}
	u := dst
	for range maxTPCRedirects {
		ti, err := target(u)
		if err != nil {
			return nil, nil, nil, xrootd.Handle{}, err
		}
		if err := t.canTPC(ctx, ti); err != nil {
			return nil, nil, nil, xrootd.Handle{}, err
		}
		cti, err := target(withCGI(u, cgi))
		if err != nil {
			return nil, nil, nil, xrootd.Handle{}, err
		}
		c, unbind, or, err := t.openWrite(ctx, cti, opts)
		var re *client.RedirectError
		if errors.As(err, &re) {
			u = withoutCGI(re.Location, "tpc.")
			continue
		}
		if err != nil {
			return nil, nil, nil, xrootd.Handle{}, relabel(err, dst)
		}
		return c, unbind, ti, or.Handle, nil
	}
	return nil, nil, nil, xrootd.Handle{}, fmt.Errorf("%s: more than %d redirects", client.Redact(dst), maxTPCRedirects)
}

// waitCopy sends the kXR_sync that is answered when the copy ended and
// reads frames until it is, asking kXR_stat of the handle every
// ProgressInterval meanwhile (one connection, answers told apart by
// their stream IDs). It waits for readable data with a short read
// deadline (bufio's Peek consumes nothing when it times out), so one
// goroutine both reads and sends.
func (t *Transport) waitCopy(ctx context.Context, c *conn, h xrootd.Handle, size int64, o TPCOptions) error {
	syncSID, err := c.send(ctx, xrootd.ReqSync, xrootd.HandleBody(h), nil)
	if err != nil {
		return err
	}
	ctxDeadline, _ := ctx.Deadline()
	var stats []xrootd.StreamID // asked, not yet answered
	var syncErr error
	done := false
	next := time.Now().Add(o.ProgressInterval)
	for !done || len(stats) > 0 {
		if !done && o.Progress != nil && len(stats) == 0 && !time.Now().Before(next) {
			sid, err := c.send(ctx, xrootd.ReqStat, xrootd.StatRequest{Handle: h}.Body(), nil)
			if err != nil {
				return err
			}
			stats = append(stats, sid)
			next = time.Now().Add(o.ProgressInterval)
		}
		if o.Progress != nil && !done {
			dl := next
			if !ctxDeadline.IsZero() && ctxDeadline.Before(dl) {
				dl = ctxDeadline
			}
			_ = c.raw.SetReadDeadline(dl)
			if err := ctx.Err(); err != nil {
				return c.ioErr(ctx, err)
			}
			_, err := c.br.Peek(1)
			_ = c.raw.SetReadDeadline(ctxDeadline)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				continue // time to ask for progress
			}
			if err != nil {
				return c.ioErr(ctx, err)
			}
			if err := ctx.Err(); err != nil {
				return c.ioErr(ctx, err)
			}
		}
		hd, err := c.header(ctx)
		if err != nil {
			return err
		}
		switch {
		case hd.StreamID == syncSID:
			if hd.Status == xrootd.StatusWaitResp {
				if _, err := c.br.Discard(int(hd.Dlen)); err != nil {
					return c.ioErr(ctx, err)
				}
				continue
			}
			if hd.Status == xrootd.StatusOK {
				if _, err := c.br.Discard(int(hd.Dlen)); err != nil {
					return c.ioErr(ctx, err)
				}
			} else if syncErr = c.rest(ctx, hd); syncErr == nil || c.broken {
				if syncErr == nil {
					syncErr = c.protoErr("kXR_sync: unexpected %v", hd.Status)
				}
				return syncErr
			}
			done = true
		case len(stats) > 0 && hd.StreamID == stats[0]:
			stats = stats[1:]
			if hd.Status != xrootd.StatusOK {
				if err := c.rest(ctx, hd); c.broken {
					return err
				}
				continue
			}
			b, err := c.body(ctx, hd.Dlen, nil)
			if err != nil {
				return err
			}
			if st, err := xrootd.ParseStat(string(b)); err == nil && o.Progress != nil && !done {
				o.Progress(st.Size, size)
			}
		default:
			return c.protoErr("answer for stream %x while waiting for the copy", hd.StreamID)
		}
	}
	if syncErr == nil && o.Progress != nil {
		o.Progress(size, size)
	}
	return syncErr
}

// compareSums compares the checksums of both ends.
func (t *Transport) compareSums(ctx context.Context, src, dst *url.URL, alg string) error {
	want, err := t.Checksum(ctx, src, alg)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	got, err := t.Checksum(ctx, dst, alg)
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	if !bytes.Equal(want, got) {
		return &client.ChecksumError{Alg: alg, Want: want, Got: got, What: "destination", Whom: "source"}
	}
	return nil
}

// tpcKey is a fresh rendezvous key: 24 hex digits as XrdCl's, but random.
func tpcKey() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// hostForCGI writes an IPv6 address in brackets, as XrdCl does.
func hostForCGI(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// withCGI returns u with the key=value pairs of cgi added (replacing
// those of the same keys).
func withCGI(u *url.URL, cgi string) *url.URL {
	v := *u
	v.RawQuery = mergeCGI(u.RawQuery, cgi)
	return &v
}

// withoutCGI returns u without the query keys that start with prefix.
func withoutCGI(u *url.URL, prefix string) *url.URL {
	v := *u
	var keep []string
	for _, kv := range strings.Split(u.RawQuery, "&") {
		if kv != "" && !strings.HasPrefix(kv, prefix) {
			keep = append(keep, kv)
		}
	}
	v.RawQuery = strings.Join(keep, "&")
	return &v
}

// annotateAs is annotate naming the user's URL (not the one with the
// rendezvous key).
func annotateAs(err error, op string, ti *urlInfo, shown *url.URL) error {
	return relabel(annotate(err, op, ti), shown)
}

// relabel makes a kXR_error name the user's URL.
func relabel(err error, shown *url.URL) error {
	var e *Error
	if errors.As(err, &e) {
		e.URL = client.Redact(shown)
	}
	return err
}

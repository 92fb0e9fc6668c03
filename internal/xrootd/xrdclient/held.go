package xrdclient

import (
	"context"
	"time"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Files opened for reading stay open on their connection for a while
// after their last read (Options.HoldOpen), as an XRootD client keeps a
// file open between reads: the engine's next Read or ReadV of the same
// file on that connection (the next chunk of a stream, the next vector
// read of a job) then skips kXR_open and its round trip. A held file is
// read as it was when opened; after HoldOpen without use it is closed by
// the next user of the connection, and with the connection at the latest.

// maxHeld bounds the files held open on one connection.
const maxHeld = 8

// heldFile is a file left open on a connection for the next reader.
type heldFile struct {
	path string // urlInfo.path: the path and opaque as opened
	open xrootd.OpenResponse
	last time.Time // when its last reader let go
}

// takeHeld takes from the pool an idle connection on which ti is held
// open, and the file's handle and open answer; nil when there is none.
// With anyAge, a file held past HoldOpen (still open on the server until
// the connection's next use) is taken too.
func (t *Transport) takeHeld(ti *urlInfo, anyAge bool) (*conn, xrootd.OpenResponse) {
	if t.opts.HoldOpen < 0 {
		return nil, xrootd.OpenResponse{}
	}
	now := time.Now()
	t.pool.mu.Lock()
	defer t.pool.mu.Unlock()
	cs := t.pool.idle[ti.key]
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if now.Sub(c.idle) > t.opts.IdleTimeout && !anyAge {
			break // older ones are staler still; get sweeps them
		}
		for k, f := range c.held {
			if f.path != ti.path || (now.Sub(f.last) > t.opts.HoldOpen && !anyAge) {
				continue
			}
			c.held = append(c.held[:k], c.held[k+1:]...)
			t.pool.idle[ti.key] = append(cs[:i:i], cs[i+1:]...)
			if len(t.pool.idle[ti.key]) == 0 {
				delete(t.pool.idle, ti.key)
			}
			c.reused, c.answered = true, false
			return c, f.open
		}
	}
	return nil, xrootd.OpenResponse{}
}

// openHeld is open's fast path: ti held open on an idle connection,
// which is bound to ctx and settled. ok is false when there is none (or
// it could not be used; the connection is then given back or dropped).
func (t *Transport) openHeld(ctx context.Context, ti *urlInfo) (c *conn, unbind func(), or xrootd.OpenResponse, ok bool) {
	c, or = t.takeHeld(ti, false)
	if c == nil {
		return nil, nil, or, false
	}
	unbind = c.bind(ctx)
	if err := c.settle(ctx); err != nil {
		t.release(c, unbind)
		return nil, nil, or, false
	}
	return c, unbind, or, true
}

// holdFile gives back a connection whose file ti (handle h, opened with
// answer or) was read to the end of what was asked: the file stays open
// on it for the next reader (see HoldOpen), or is closed when holding is
// off or the connection is in doubt.
func (t *Transport) holdFile(ctx context.Context, c *conn, unbind func(), ti *urlInfo, or xrootd.OpenResponse) {
	if t.opts.HoldOpen < 0 || c.broken || ctx.Err() != nil {
		t.closeFile(ctx, c, unbind, or.Handle)
		return
	}
	c.held = append(c.held, heldFile{path: ti.path, open: or, last: time.Now()})
	t.expireHeld(ctx, c)
	t.release(c, unbind)
}

// expireHeld closes the files held on c past HoldOpen, and the oldest
// beyond maxHeld, without waiting for the answers (settle reads them).
func (t *Transport) expireHeld(ctx context.Context, c *conn) {
	now := time.Now()
	keep := c.held[:0]
	for i, f := range c.held {
		if now.Sub(f.last) <= t.opts.HoldOpen && len(c.held)-i <= maxHeld {
			keep = append(keep, f)
			continue
		}
		c.closeLater(ctx, f.open.Handle)
	}
	clear(c.held[len(keep):])
	c.held = keep
}

// releaseHeld closes the files ti held open on idle connections, however
// long ago they were last read, and waits for the server to have closed
// them (before ti is opened for writing).
func (t *Transport) releaseHeld(ctx context.Context, ti *urlInfo) {
	for {
		c, or := t.takeHeld(ti, true)
		if c == nil {
			return
		}
		unbind := c.bind(ctx)
		if err := c.settle(ctx); err == nil {
			_, _ = c.call(ctx, xrootd.ReqClose, xrootd.HandleBody(or.Handle), nil)
		}
		t.release(c, unbind)
	}
}

package xrdclient

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// pool keeps idle logged-in connections per host:port. A stream takes one
// for the whole of its operation (an open file's handle belongs to the
// connection it was opened on) and gives it back; so the engine's N
// parallel streams to a server use N connections, each with its own TCP
// window. Idle connections are bounded per host and age out.
type pool struct {
	mu    sync.Mutex
	idle  map[string][]*conn // most recently used last
	swept time.Time          // last sweep of every host's stale connections
}

// get returns an idle connection to addr or dials a new one. Idle
// connections past IdleTimeout are closed (the server may have dropped
// them already).
func (t *Transport) get(ctx context.Context, ti *urlInfo) (*conn, error) {
	addr := ti.key
	now := time.Now()
	var c *conn
	var stale []*conn
	t.pool.mu.Lock()
	cs := t.pool.idle[addr]
	// The last is the most recently used; the ones before it are older.
	for len(cs) > 0 && c == nil {
		last := cs[len(cs)-1]
		cs = cs[:len(cs)-1]
		if now.Sub(last.idle) > t.opts.IdleTimeout {
			stale = append(stale, cs...)
			stale = append(stale, last)
			cs = nil
			break
		}
		c = last
	}
	if len(cs) == 0 {
		delete(t.pool.idle, addr)
	} else {
		t.pool.idle[addr] = cs
	}
	t.pool.mu.Unlock()
	for _, s := range stale {
		s.raw.Close()
	}
	if c != nil {
		c.reused, c.answered = true, false
		return c, nil
	}
	return t.dial(ctx, ti)
}

// put gives c back: to the pool when it is healthy and there is room,
// else it is closed.
func (t *Transport) put(c *conn) {
	if c == nil {
		return
	}
	if c.broken {
		c.raw.Close()
		return
	}
	c.idle = time.Now()
	t.pool.mu.Lock()
	if t.pool.idle == nil {
		t.pool.idle = map[string][]*conn{}
	}
	var stale []*conn
	if c.idle.Sub(t.pool.swept) > t.opts.IdleTimeout {
		// Connections to servers no longer used would otherwise stay
		// open until the process ends.
		t.pool.swept = c.idle
		for addr, cs := range t.pool.idle {
			k := 0
			for k < len(cs) && c.idle.Sub(cs[k].idle) > t.opts.IdleTimeout {
				k++
			}
			stale = append(stale, cs[:k]...)
			if k == len(cs) {
				delete(t.pool.idle, addr)
			} else {
				t.pool.idle[addr] = cs[k:]
			}
		}
	}
	defer func() {
		for _, s := range stale {
			s.raw.Close()
		}
	}()
	cs := t.pool.idle[c.key]
	if len(cs) >= t.opts.MaxIdlePerHost {
		t.pool.mu.Unlock()
		c.raw.Close()
		return
	}
	t.pool.idle[c.key] = append(cs, c)
	t.pool.mu.Unlock()
}

// CloseIdle closes the idle connections.
func (t *Transport) CloseIdle() {
	t.pool.mu.Lock()
	idle := t.pool.idle
	t.pool.idle = nil
	t.pool.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.raw.Close()
		}
	}
}

// dial connects to ti's server and logs in.
func (t *Transport) dial(ctx context.Context, ti *urlInfo) (*conn, error) {
	d := net.Dialer{Timeout: t.opts.DialTimeout, KeepAlive: 30 * time.Second, Control: t.opts.Control}
	nc, err := d.DialContext(ctx, "tcp", ti.addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, raw: nc, br: bufio.NewReaderSize(nc, 64<<10), addr: ti.addr, key: ti.key, log: t.opts.Log}
	unbind := c.bind(ctx)
	err = c.handshake(ctx, &t.opts, ti)
	unbind()
	if err == nil && c.broken {
		err = c.ioErr(ctx, context.Cause(ctx))
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// acquire takes a connection to ti's server, binds it to ctx and runs first on
// it. A reused connection that fails before any answer arrived was most
// likely closed by the server while idle: first runs once more on a fresh
// one (first is a request that has no effect unless answered, or is
// idempotent). On success the caller owns the bound connection and gives
// it back with release; on failure it is already given back.
func (t *Transport) acquire(ctx context.Context, ti *urlInfo, first func(c *conn) error) (*conn, func(), error) {
	for try := 0; ; try++ {
		c, err := t.get(ctx, ti)
		if err != nil {
			return nil, nil, err
		}
		if try > 0 {
			c.reused = false
		}
		unbind := c.bind(ctx)
		t.expireHeld(ctx, c)
		if err := c.settle(ctx); err != nil {
			// A connection that cannot finish its last user's business
			// is no good: a fresh one.
			t.release(c, unbind)
			if ctx.Err() != nil {
				return nil, nil, err
			}
			continue
		}
		err = first(c)
		if err == nil {
			return c, unbind, nil
		}
		stale := c.reused && c.broken && ctx.Err() == nil && staleConn(err)
		t.release(c, unbind)
		if !stale {
			return nil, nil, err
		}
	}
}

// release unbinds c from its context and gives it back to the pool (or
// closes it, if it is broken).
func (t *Transport) release(c *conn, unbind func()) {
	unbind()
	t.put(c)
}

// session runs fn on a connection to ti's server bound to ctx (see
// acquire).
func (t *Transport) session(ctx context.Context, ti *urlInfo, fn func(c *conn) error) error {
	c, unbind, err := t.acquire(ctx, ti, fn)
	if err != nil {
		return err
	}
	t.release(c, unbind)
	return nil
}

// staleConn reports an error a connection closed while idle gives on its
// next request.
func staleConn(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, errNoAnswer)
}

// errNoAnswer: the connection ended before any byte of the answer.
var errNoAnswer = errors.New("connection closed before an answer")

package wan

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	dialTimeout = 5 * time.Second
	// sockBuf is the kernel send buffer (and receive buffer) the relay asks
	// for on both of its sockets; Linux doubles it. Bytes in the relay's send
	// buffer count as delivered, so an autotuned one (up to tcp_wmem max,
	// 4 MiB) would let a stalled receiver hide that much in-flight data
	// outside the window. The receive buffer is the sender's view: bytes in
	// it are "sent" to the sender's application but not yet in the emulated
	// path. Both are small enough not to matter against a window of MiBs and
	// large enough not to slow a loopback relay (see BenchmarkRelay).
	sockBuf = 256 << 10
)

// retryAccept reports accept errors worth retrying after a pause.
func retryAccept(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED)
}

// conn is one relayed connection: the client's socket, the upstream socket
// and a pipe each way.
type conn struct {
	r              *Relay
	client, server *net.TCPConn
	start          time.Duration // accept time on the relay clock

	done    chan struct{} // closed when the connection ends
	endOnce sync.Once
	fwd     atomic.Int64 // bytes forwarded both ways, for Reset.AfterBytes
}

func (r *Relay) handle(ctx context.Context, client *net.TCPConn) {
	start := r.now()
	r.total.Add(1)
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", r.to)
	if err != nil {
		r.warn("dial upstream", "to", r.to, "err", err)
		client.SetLinger(0) // the client sees a refused connection, not an empty one
		client.Close()
		return
	}
	server := nc.(*net.TCPConn)
	if err := checkAddr(server.RemoteAddr()); err != nil {
		r.warn("dial upstream", "to", r.to, "err", err)
		client.SetLinger(0)
		client.Close()
		server.Close()
		return
	}
	for _, s := range []*net.TCPConn{client, server} {
		// Best effort: a failure leaves the kernel's autotuning in place.
		_ = s.SetWriteBuffer(sockBuf)
		_ = s.SetReadBuffer(sockBuf)
	}
	c := &conn{r: r, client: client, server: server, start: start, done: make(chan struct{})}
	r.mu.Lock()
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	r.active.Add(1)
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		r.active.Add(-1)
	}()
	stop := context.AfterFunc(ctx, func() { c.end(false) })
	defer stop()
	if after := r.cfg.Reset.After; after > 0 {
		t := time.AfterFunc(after, func() { c.injectReset("after") })
		defer t.Stop()
	}
	log := r.log.With("client", client.RemoteAddr().String())
	log.Debug("open")

	cfg := r.cfg
	var upGate, downGate time.Duration
	if cfg.Handshake {
		upGate, downGate = start+cfg.RTT, start+cfg.RTT*3/2
	}
	up := newPipe(c, client, server, r.up, upGate, &r.up0)
	down := newPipe(c, server, client, r.down, downGate, &r.down0)
	var wg sync.WaitGroup
	wg.Go(up.read)
	wg.Go(up.write)
	wg.Go(down.read)
	wg.Go(down.write)
	wg.Wait()
	c.end(false)
	log.Debug("close", "fwd", c.fwd.Load())
}

// end closes both sockets, with an RST if reset; the first call wins.
func (c *conn) end(reset bool) bool {
	first := false
	c.endOnce.Do(func() {
		first = true
		if reset {
			c.client.SetLinger(0)
			c.server.SetLinger(0)
		}
		close(c.done)
		c.client.Close()
		c.server.Close()
	})
	return first
}

// injectReset resets the connection as a fault and counts it.
func (c *conn) injectReset(why string) bool {
	if !c.end(true) {
		return false
	}
	c.r.resets.Add(1)
	c.r.log.Info("reset injected", "client", c.client.RemoteAddr().String(), "why", why, "fwd", c.fwd.Load())
	return true
}

// take reserves up to n bytes of the connection's byte budget before an
// injected reset; last reports that the budget is now spent.
func (c *conn) take(n int) (allowed int, last bool) {
	lim := c.r.cfg.Reset.AfterBytes
	if lim <= 0 {
		c.fwd.Add(int64(n))
		return n, false
	}
	for {
		cur := c.fwd.Load()
		k := min(int64(n), lim-cur)
		if k <= 0 {
			return 0, true
		}
		if c.fwd.CompareAndSwap(cur, cur+k) {
			return int(k), cur+k >= lim
		}
	}
}

// stallEnd returns when the stall covering now ends, or now if none does.
func (c *conn) stallEnd(now time.Duration) time.Duration {
	end := max(now, time.Duration(c.r.stallUntil.Load()))
	s := c.r.cfg.Stall
	if s.Every > 0 {
		base := c.start
		if s.AllConns {
			base = 0
		}
		if el := now - base; el >= s.Every {
			if phase := el % s.Every; phase < s.For {
				end = max(end, now-phase+s.For)
			}
		}
	}
	return end
}

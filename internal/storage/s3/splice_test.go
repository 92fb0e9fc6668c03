package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/s3conn"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/s3"
)

// tcpSink is a loopback TCP connection to send to (its ReadFrom splices
// from a TCP source) and what arrives at its other end.
type tcpSink struct {
	*net.TCPConn
	got  bytes.Buffer
	done chan struct{}
}

func newSink(t *testing.T) *tcpSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &tcpSink{done: make(chan struct{})}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s.TCPConn = c.(*net.TCPConn)
	rc, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	go func() {
		defer close(s.done)
		io.Copy(&s.got, rc)
		rc.Close()
	}()
	t.Cleanup(func() { s.TCPConn.Close() })
	return s
}

// received closes the sending side and returns all that arrived.
func (s *tcpSink) received() []byte {
	s.TCPConn.Close()
	<-s.done
	return s.got.Bytes()
}

// countingWrap counts the GETs the export's wrapper (metrics) sees.
type countingWrap struct{ gets atomic.Int64 }

func (c *countingWrap) wrap(next http.RoundTripper) http.RoundTripper {
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodGet {
			c.gets.Add(1)
		}
		return next.RoundTrip(r)
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSendRange: ranges of an object sent to a TCP connection arrive
// byte for byte, in GETs of at most 64 MiB that the export's metrics see;
// what SendRange does not take (small ranges, writers without ReadFrom)
// it leaves untouched.
func TestSendRange(t *testing.T) {
	cw := &countingWrap{}
	b, _ := newBackend(t, "", func(o *s3.Options) { o.Conn.Wrap = cw.wrap })
	data := randBytes(7, 65<<20+3)
	put(t, b, "big", data, int64(len(data)))
	f, err := b.Open(t.Context(), "big")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, ok := f.(storage.RangeSender)
	if !ok || !rs.CanSend(1<<20) {
		t.Fatalf("an S3 file over http:// does not send ranges itself (%T)", f)
	}
	for _, c := range []struct {
		off, n int64
		gets   int64
	}{
		{0, int64(len(data)), 2}, // two windows, one connection
		{12345, 5<<20 + 7, 1},
		{int64(len(data)) - 1<<20, 1 << 20, 1},
	} {
		sink := newSink(t)
		before := cw.gets.Load()
		sent, handled, err := rs.SendRange(t.Context(), sink, c.off, c.n)
		got := sink.received()
		if !handled || err != nil || sent != c.n {
			t.Fatalf("SendRange(%d, %d) = %d, %v, %v", c.off, c.n, sent, handled, err)
		}
		if !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Errorf("SendRange(%d, %d): the %d bytes received differ from the object's", c.off, c.n, len(got))
		}
		if g := cw.gets.Load() - before; g != c.gets {
			t.Errorf("SendRange(%d, %d) sent %d GETs, want %d", c.off, c.n, g, c.gets)
		}
	}
	var buf struct{ io.Writer } // no ReadFrom
	buf.Writer = io.Discard
	if _, handled, _ := rs.SendRange(t.Context(), buf, 0, 4<<20); handled {
		t.Error("SendRange took a writer without ReadFrom")
	}
	if _, handled, _ := rs.SendRange(t.Context(), newSink(t), 0, 100<<10); handled {
		t.Error("SendRange took a small range")
	}
}

// TestSendRangeReplaced: a range of an object replaced since it was
// opened fails with ErrConflict before any byte is sent.
func TestSendRangeReplaced(t *testing.T) {
	b, _ := newBackend(t, "", nil)
	put(t, b, "f", randBytes(1, 3<<20), -1)
	f, err := b.Open(t.Context(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	put(t, b, "f", randBytes(2, 3<<20), -1)
	sink := newSink(t)
	sent, handled, err := f.(storage.RangeSender).SendRange(t.Context(), sink, 0, 2<<20)
	if !handled || !errors.Is(err, storage.ErrConflict) || sent != 0 {
		t.Errorf("SendRange of a replaced object = %d, %v, %v; want 0, handled, ErrConflict", sent, handled, err)
	}
	if got := sink.received(); len(got) != 0 {
		t.Errorf("%d bytes of a replaced object were sent", len(got))
	}
}

// stallProxy forwards TCP connections to target, but passes only the
// first limit bytes of each answer once stall is set; then it holds.
type stallProxy struct {
	ln    net.Listener
	limit int64
	stall atomic.Bool
	wg    sync.WaitGroup
}

func newStallProxy(t *testing.T, target string, limit int64) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, limit: limit}
	var conns sync.Map
	closing := make(chan struct{})
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, u)
			p.wg.Go(func() { io.Copy(u, c); u.Close() })
			p.wg.Go(func() {
				if p.stall.Load() {
					io.Copy(c, io.LimitReader(u, p.limit))
					<-closing // hold
				} else {
					io.Copy(c, u)
				}
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		close(closing)
		ln.Close()
		conns.Range(func(k, v any) bool { k.(net.Conn).Close(); v.(net.Conn).Close(); return true })
		p.wg.Wait()
	})
	return p
}

// TestSendRangeStall: an S3 server that stops in the middle of a body
// fails the send with ErrUpstreamTimeout after StallTimeout; a canceled
// context ends it at once.
func TestSendRangeStall(t *testing.T) {
	s := server(t)
	px := newStallProxy(t, s.Endpoint[len("http://"):], 2<<20)
	b, _ := newBackend(t, "", func(o *s3.Options) {
		o.Conn = s3conn.Conn{Endpoint: "http://" + px.ln.Addr().String(), Region: s.Region, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
		o.StallTimeout = 2 * time.Second
	})
	put(t, b, "f", randBytes(3, 8<<20), -1)
	f, err := b.Open(t.Context(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	px.stall.Store(true)
	start := time.Now()
	sent, handled, err := f.(storage.RangeSender).SendRange(t.Context(), newSink(t), 0, 8<<20)
	if !handled || !errors.Is(err, storage.ErrUpstreamTimeout) || sent >= 8<<20 {
		t.Errorf("SendRange from a stalled server = %d, %v, %v; want ErrUpstreamTimeout", sent, handled, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the stalled send took %v", d)
	}

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	_, _, err = f.(storage.RangeSender).SendRange(ctx, newSink(t), 0, 8<<20)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("SendRange with its context canceled: %v", err)
	}
	if d := time.Since(start); d > time.Second { // the stall timeout is 2 s
		t.Errorf("the canceled send took %v", d)
	}
}

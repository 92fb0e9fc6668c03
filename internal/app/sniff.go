package app

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sniffer splits one listening port between HTTP and a binary protocol
// (XRootD's handshake starts with a zero byte; HTTP with a method's
// letter, TLS with 0x16), as XRootD does on 1094. It peeks at the first
// byte with MSG_PEEK, consuming nothing, so the HTTP server still gets
// the *net.TCPConn itself (and sendfile with it).
type sniffer struct {
	ln      net.Listener
	binary  func(net.Conn) // handles a connection that starts with 0x00
	timeout time.Duration  // for the first byte

	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	errMu sync.Mutex
	err   error
}

// newSniffer starts accepting on ln. Accept on it returns the HTTP
// connections; binary gets the others, each in its own goroutine.
func newSniffer(ln net.Listener, timeout time.Duration, binary func(net.Conn)) *sniffer {
	s := &sniffer{ln: ln, binary: binary, timeout: timeout, conns: make(chan net.Conn), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *sniffer) loop() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.errMu.Lock()
			s.err = err
			s.errMu.Unlock()
			s.Close()
			return
		}
		go s.route(c)
	}
}

// route waits for the first byte (bounded) and hands the connection on.
func (s *sniffer) route(c net.Conn) {
	first, err := peekByte(c, s.timeout)
	if errors.Is(err, errNotSocket) {
		// A wrapped connection (tests, instrumentation): read the byte and
		// replay it; such a connection has no sendfile to keep anyway.
		c, first, err = readFirst(c, s.timeout)
	}
	if err != nil {
		c.Close() // said nothing in time, or went away
		return
	}
	if first == 0 && s.binary != nil {
		s.binary(c)
		return
	}
	select {
	case s.conns <- c:
	case <-s.done:
		c.Close()
	}
}

// peekByte reads the first byte without consuming it.
func peekByte(c net.Conn, timeout time.Duration) (byte, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, errNotSocket
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	var n int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, errors.New("connection closed before its first byte")
	}
	return b[0], nil
}

var errNotSocket = errors.New("not a socket")

// readFirst reads the first byte of a connection that cannot be peeked
// and returns a connection that reads it again.
func readFirst(c net.Conn, timeout time.Duration) (net.Conn, byte, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return c, 0, err
	}
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	if err != nil {
		return c, 0, err
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return c, 0, err
	}
	return &replayConn{Conn: c, first: b[:]}, b[0], nil
}

// replayConn returns first before the rest of Conn.
type replayConn struct {
	net.Conn
	first []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Accept returns the next HTTP connection.
func (s *sniffer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		s.errMu.Lock()
		defer s.errMu.Unlock()
		if s.err != nil {
			return nil, s.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting.
func (s *sniffer) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ln.Close()
	})
	return err
}

func (s *sniffer) Addr() net.Addr { return s.ln.Addr() }

// SplitListener serves HTTP and a binary protocol (root://) on one port:
// Accept returns the HTTP connections; binary gets each connection whose
// first byte is 0, unread. timeout bounds the wait for the first byte.
func SplitListener(ln net.Listener, timeout time.Duration, binary func(net.Conn)) net.Listener {
	return newSniffer(ln, timeout, binary)
}

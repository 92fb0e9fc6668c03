package interop

import (
	"bytes"
	"io"
	"net"
	"sync"
)

// rangeLog records, for every request that carried a Range header, how
// many ranges it asked for. It is fed by sniffListener, which watches the
// bytes clients send, so a test can prove that a client (uproot's
// HTTPSource) really used multi-range requests without the server having to
// expose that.
type rangeLog struct {
	mu     sync.Mutex
	counts []int
}

func (l *rangeLog) add(n int) {
	l.mu.Lock()
	l.counts = append(l.counts, n)
	l.mu.Unlock()
}

// Snapshot returns the range counts recorded so far, in arrival order.
func (l *rangeLog) Snapshot() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.counts...)
}

// sniffListener wraps accepted connections in sniffConn.
type sniffListener struct {
	net.Listener
	log *rangeLog
}

func (l sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, log: l.log}, nil
}

// maxSniffLine is longer than the server's MaxHeaderBytes: a header line
// longer than that cannot be a request the server accepted.
const maxSniffLine = 512 << 10

// sniffConn scans what the client sends for "Range:" header lines. It
// forwards ReadFrom and CloseWrite, which net/http looks for on its
// connection, so the server behaves as on a bare *net.TCPConn: sendfile for
// bodies, and a half-close (not a reset) when it closes a connection whose
// request body it did not read.
type sniffConn struct {
	net.Conn
	log  *rangeLog
	line []byte
	skip bool // inside an over-long line (e.g. an upload body)
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scan(p[:n])
	return n, err
}

func (c *sniffConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(c.Conn, r)
}

func (c *sniffConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *sniffConn) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.appendLine(p)
			return
		}
		c.appendLine(p[:i])
		if !c.skip {
			c.header(bytes.TrimRight(c.line, "\r"))
		}
		c.line, c.skip = c.line[:0], false
		p = p[i+1:]
	}
}

func (c *sniffConn) appendLine(p []byte) {
	if c.skip {
		return
	}
	if len(c.line)+len(p) > maxSniffLine {
		c.line, c.skip = c.line[:0], true
		return
	}
	c.line = append(c.line, p...)
}

func (c *sniffConn) header(line []byte) {
	const name = "range:"
	if len(line) <= len(name) || !bytes.EqualFold(line[:len(name)], []byte(name)) {
		return
	}
	v := bytes.TrimSpace(line[len(name):])
	if !bytes.HasPrefix(bytes.ToLower(v), []byte("bytes=")) {
		return
	}
	c.log.add(bytes.Count(v, []byte(",")) + 1)
}

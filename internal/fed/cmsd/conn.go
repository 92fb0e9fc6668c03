package cmsd

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// writeTimeout bounds one frame's write: a peer that stops reading is
// dropped instead of blocking its writers.
const writeTimeout = 10 * time.Second

// link is one cms connection: frames are written whole, one at a time.
type link struct {
	c  net.Conn
	mu sync.Mutex
}

func (l *link) send(f cms.Frame) error {
	b := f.Bytes()
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := l.c.Write(b)
	if err != nil {
		return fmt.Errorf("sending %s: %w", cms.CodeName(f.Code), err)
	}
	return nil
}

// request sends a request frame with data.
func (l *link) request(stream uint32, code, mod uint8, data []byte) error {
	f, err := cms.NewFrame(stream, code, mod, data)
	if err != nil {
		return err
	}
	return l.send(f)
}

// respond sends a response (an answer to a request with a stream ID).
func (l *link) respond(r cms.Response) error {
	f, err := r.Frame()
	if err != nil {
		return err
	}
	return l.send(f)
}

func (l *link) close() error { return l.c.Close() }

// pathFrame builds a raw path message (state, have, gone).
func pathFrame(stream uint32, code, mod uint8, path string) (cms.Frame, error) {
	data, err := cms.PathData(path, true)
	if err != nil {
		return cms.Frame{}, err
	}
	return cms.NewFrame(stream, code, mod|cms.ModRaw, data)
}

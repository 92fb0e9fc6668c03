package httpserve

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// lingerTime bounds how long the body of a refused upload is read and
// discarded after the answer (see linger).
const lingerTime = 5 * time.Second

// bodyState tracks whether a request body was started and not finished.
type bodyState struct {
	io.ReadCloser
	started, ended atomic.Bool
}

func (b *bodyState) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.started.Store(true)
	}
	if err != nil {
		b.ended.Store(true) // EOF, or broken: nothing more to read
	}
	return n, err
}

// midway reports a body the handler began reading and left unfinished.
func (b *bodyState) midway() bool { return b.started.Load() && !b.ended.Load() }

// linger reads and discards what is left of the body of an upload
// refused midway (a full disk's 507), for at most lingerTime, after the
// answer is flushed: as nginx's lingering close, so that the client sees
// the answer. Closing a connection with unread data in it sends a reset,
// which can destroy the answer before the client reads it; net/http waits
// a little before closing for that reason, but not after a request that
// asked "Expect: 100-continue" (as curl does for large uploads). Clients
// stop sending when the answer comes (curl, Go, davix), so the wait is
// usually one round trip.
func linger(w http.ResponseWriter, body *bodyState) {
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}
	if err := rc.SetReadDeadline(time.Now().Add(lingerTime)); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, body)
}

package httpserve

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/wanda-fed/wanda/internal/monitor"
)

// Sessions gives each HTTP connection a monitoring session, as XRootD's
// streams see an XrdHttp connection: one login (started by its first
// request on a file), one disconnection when the connection closes. Set
// the http.Server's ConnContext and ConnState to its methods (ConnState
// chains to the one the server had).
type Sessions struct {
	rec   monitor.Sessions
	conns sync.Map // net.Conn -> *connSession
	n     atomic.Int64
}

// NewSessions starts the sessions of rec (nil when rec is nil).
func NewSessions(rec monitor.Sessions) *Sessions {
	if rec == nil {
		return nil
	}
	return &Sessions{rec: rec}
}

type connSession struct {
	once sync.Once
	s    atomic.Pointer[monitor.Session]
	num  int64
}

type connKey struct{}

// ConnContext keeps c's session holder in its requests' context.
func (ss *Sessions) ConnContext(ctx context.Context, c net.Conn) context.Context {
	cs := &connSession{num: ss.n.Add(1)}
	ss.conns.Store(c, cs)
	return context.WithValue(ctx, connKey{}, cs)
}

// Wrap is hs's ConnContext and ConnState with the sessions'.
func (ss *Sessions) Wrap(hs *http.Server) {
	if ss == nil {
		return
	}
	prevCtx, prevState := hs.ConnContext, hs.ConnState
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		return ss.ConnContext(ctx, c)
	}
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		if prevState != nil {
			prevState(c, st)
		}
		ss.ConnState(c, st)
	}
}

// ConnState ends a closed connection's session.
func (ss *Sessions) ConnState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	if v, ok := ss.conns.LoadAndDelete(c); ok {
		cs := v.(*connSession)
		cs.once.Do(func() {}) // no session starts after the end
		cs.s.Load().End()
	}
}

// session is the session of r's connection, started now if it has none.
func (ss *Sessions) session(r *http.Request, proto string) *monitor.Session {
	if ss == nil {
		return nil
	}
	cs, _ := r.Context().Value(connKey{}).(*connSession)
	if cs == nil {
		return nil
	}
	cs.once.Do(func() {
		cs.s.Store(ss.rec.NewSession(monitor.SessionInfo{Protocol: proto, PID: cs.num, Client: r.RemoteAddr}))
	})
	return cs.s.Load()
}

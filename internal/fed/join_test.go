package fed

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRedirector is the redirector side of membership, as far as a member
// can see it: it records heartbeats and leaves and answers with reply.
type fakeRedirector struct {
	mu        sync.Mutex
	reply     HeartbeatReply
	errStatus int // answer heartbeats with this status and an Error body
	beats     []beat
	deletes   []beat
	blockDel  bool // DELETE waits until the client gives up
}

type beat struct {
	m           Member
	id          string
	auth, ctype string
}

func newFake(id string) *fakeRedirector {
	return &fakeRedirector{reply: HeartbeatReply{Version: Version, Redirector: id, MissLimit: 3}}
}

func (f *fakeRedirector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/members" {
		WriteError(w, http.StatusNotFound, "no such endpoint")
		return
	}
	b := beat{auth: r.Header.Get("Authorization"), ctype: r.Header.Get("Content-Type")}
	switch r.Method {
	case http.MethodPost:
		if err := Decode(r.Body, &b.m); err != nil {
			WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := b.m.Validate(); err != nil {
			WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		f.mu.Lock()
		f.beats = append(f.beats, b)
		reply, status := f.reply, f.errStatus
		f.mu.Unlock()
		if status != 0 {
			WriteError(w, status, "the fake says no")
			return
		}
		WriteJSON(w, http.StatusOK, reply)
	case http.MethodDelete:
		b.id = r.URL.Query().Get("id")
		f.mu.Lock()
		f.deletes = append(f.deletes, b)
		block := f.blockDel
		f.mu.Unlock()
		if block {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		WriteError(w, http.StatusMethodNotAllowed, "no")
	}
}

func (f *fakeRedirector) set(edit func(*fakeRedirector)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	edit(f)
}

func (f *fakeRedirector) beatCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.beats)
}

func (f *fakeRedirector) lastBeat() beat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beats[len(f.beats)-1]
}

func (f *fakeRedirector) deleted() []beat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]beat(nil), f.deletes...)
}

// serveOn serves h on ln until the test ends or the returned server is
// closed.
func serveOn(t *testing.T, ln net.Listener, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func startFake(t *testing.T, f *fakeRedirector) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, ln, f)
}

// memberSelf describes a member; every call counts in Load.Active, so a
// test sees that each heartbeat asked afresh.
func memberSelf(calls *atomic.Int64) func() Member {
	return func() Member {
		return Member{ID: "http://127.0.0.1:9", Instance: "i1", Role: RoleServer, URL: "http://127.0.0.1:9",
			Exports: []Export{{Prefix: "/store"}}, Load: Load{Active: calls.Add(1)}}
	}
}

// checkGoroutines fails the test if goroutines started during it outlive
// it. Register it first: cleanups run last-in first-out.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		waitFor(t, 5*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	})
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("timed out after %v waiting for %s\n%s", timeout, what, buf[:runtime.Stack(buf, true)])
		}
		<-tick.C
	}
}

// logBuffer collects log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func newLog() (*logBuffer, *slog.Logger) {
	lb := &logBuffer{}
	return lb, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func stop(t *testing.T, j *Joiner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j.Stop(ctx)
}

func TestJoinerHeartbeats(t *testing.T) {
	checkGoroutines(t)
	f1, f2 := newFake("r1"), newFake("r2")
	f1.reply.IntervalMS = 100 // adopted: heartbeats every 100 ms from now on
	s1, s2 := startFake(t, f1), startFake(t, f2)
	var calls atomic.Int64
	j := StartJoiner(JoinOptions{
		Parents:  []string{s1.URL, s2.URL + "/"},
		Interval: time.Hour,
		Token:    "s3cret",
		Self:     memberSelf(&calls),
	})
	t.Cleanup(func() { stop(t, j) })

	waitFor(t, 5*time.Second, "three heartbeats at the adopted interval", func() bool { return f1.beatCount() >= 3 })
	waitFor(t, 5*time.Second, "the first heartbeat to r2", func() bool { return f2.beatCount() >= 1 })
	b := f1.lastBeat()
	if b.auth != "Bearer s3cret" || b.ctype != "application/json" || b.m.Version != Version || b.m.ID != "http://127.0.0.1:9" {
		t.Errorf("heartbeat %+v", b)
	}
	if b.m.Load.Active < 3 {
		t.Errorf("Self not asked before each heartbeat: load %+v", b.m.Load)
	}
	// r2 named no interval: the hour stands, so one heartbeat only.
	if n := f2.beatCount(); n != 1 {
		t.Errorf("r2 got %d heartbeats", n)
	}

	st := j.Status()
	if len(st) != 2 || st[0].URL != s1.URL || st[1].URL != s2.URL {
		t.Fatalf("Status = %+v", st)
	}
	if !st[0].Joined || st[0].Redirector != "r1" || st[0].Interval != 100*time.Millisecond || st[0].LastOK.IsZero() || st[0].LastError != "" {
		t.Errorf("r1 status %+v", st[0])
	}
	if !st[1].Joined || st[1].Redirector != "r2" || st[1].Interval != time.Hour {
		t.Errorf("r2 status %+v", st[1])
	}

	// Beat asks for a heartbeat now, without waiting for the hour.
	j.Beat()
	waitFor(t, 5*time.Second, "a heartbeat on demand", func() bool { return f2.beatCount() >= 2 })
}

func TestJoinerClampsInterval(t *testing.T) {
	checkGoroutines(t)
	for _, tt := range []struct {
		ms   int64
		want time.Duration
	}{{1, MinInterval}, {int64(time.Hour / time.Millisecond), MaxInterval}, {250, 250 * time.Millisecond}} {
		f := newFake("r")
		f.reply.IntervalMS = tt.ms
		s := startFake(t, f)
		var calls atomic.Int64
		j := StartJoiner(JoinOptions{Parents: []string{s.URL}, Interval: time.Hour, Self: memberSelf(&calls), Client: s.Client()})
		waitFor(t, 5*time.Second, "a heartbeat", func() bool { return j.Status()[0].Joined })
		if got := j.Status()[0].Interval; got != tt.want {
			t.Errorf("reply interval %d ms: using %v, want %v", tt.ms, got, tt.want)
		}
		stop(t, j)
	}
}

func TestJoinerDrainedEcho(t *testing.T) {
	checkGoroutines(t)
	f := newFake("r")
	f.reply.Drained = true
	s := startFake(t, f)
	var calls atomic.Int64
	j := StartJoiner(JoinOptions{Parents: []string{s.URL}, Interval: time.Hour, Self: memberSelf(&calls)})
	t.Cleanup(func() { stop(t, j) })

	waitFor(t, 5*time.Second, "the first heartbeat", func() bool { return j.Status()[0].Joined })
	if f.lastBeat().m.Drained || !j.Status()[0].Drained {
		t.Fatalf("first heartbeat drained %v; status %+v", f.lastBeat().m.Drained, j.Status()[0])
	}
	j.Beat()
	waitFor(t, 5*time.Second, "the second heartbeat", func() bool { return f.beatCount() >= 2 })
	if !f.lastBeat().m.Drained {
		t.Fatal("drain not echoed")
	}
	f.set(func(f *fakeRedirector) { f.reply.Drained = false })
	j.Beat()
	waitFor(t, 5*time.Second, "undrained", func() bool { return !j.Status()[0].Drained })
	j.Beat()
	waitFor(t, 5*time.Second, "the fourth heartbeat", func() bool { return f.beatCount() >= 4 })
	if f.lastBeat().m.Drained {
		t.Fatal("undrain not echoed")
	}
}

func TestJoinerRemoved(t *testing.T) {
	checkGoroutines(t)
	f, other := newFake("r"), newFake("other")
	f.reply.Removed = true
	f.reply.IntervalMS = 100
	s, so := startFake(t, f), startFake(t, other)
	lb, log := newLog()
	var calls atomic.Int64
	j := StartJoiner(JoinOptions{Parents: []string{s.URL, so.URL}, Interval: time.Hour, Self: memberSelf(&calls), Log: log})

	waitFor(t, 5*time.Second, "removal", func() bool { return j.Status()[0].Removed })
	waitFor(t, 5*time.Second, "the other parent", func() bool { return j.Status()[1].Joined })
	if st := j.Status()[0]; st.Joined || st.Redirector != "r" {
		t.Errorf("status %+v", st)
	}
	j.Beat() // the removed parent's loop has ended: this reaches only the other
	waitFor(t, 5*time.Second, "a heartbeat on demand", func() bool { return other.beatCount() >= 2 })
	stop(t, j)
	if n := f.beatCount(); n != 1 {
		t.Errorf("%d heartbeats to a redirector that removed us", n)
	}
	if d := f.deleted(); len(d) != 0 {
		t.Errorf("DELETE sent to a redirector that removed us: %+v", d)
	}
	if d := other.deleted(); len(d) != 1 {
		t.Errorf("other parent saw %d DELETEs", len(d))
	}
	if lb.count("removed from redirector") != 1 {
		t.Errorf("log:\n%s", lb.buf.String())
	}
}

func TestJoinerStopLeaves(t *testing.T) {
	checkGoroutines(t)
	f := newFake("r")
	s := startFake(t, f)
	var calls atomic.Int64
	j := StartJoiner(JoinOptions{Parents: []string{s.URL}, Interval: time.Hour, Token: "tok", Self: memberSelf(&calls)})
	waitFor(t, 5*time.Second, "the first heartbeat", func() bool { return j.Status()[0].Joined })
	stop(t, j)
	d := f.deleted()
	if len(d) != 1 || d[0].id != "http://127.0.0.1:9" || d[0].auth != "Bearer tok" {
		t.Fatalf("DELETEs %+v", d)
	}
	stop(t, j) // idempotent
	j.Beat()   // harmless after Stop
	if n := len(f.deleted()); n != 1 {
		t.Errorf("%d DELETEs after a second Stop", n)
	}
}

// A redirector that never answers the leave does not hold up shutdown
// beyond the caller's context.
func TestJoinerStopBounded(t *testing.T) {
	checkGoroutines(t)
	f := newFake("r")
	f.blockDel = true
	s := startFake(t, f)
	var calls atomic.Int64
	j := StartJoiner(JoinOptions{Parents: []string{s.URL}, Interval: time.Hour, Self: memberSelf(&calls)})
	waitFor(t, 5*time.Second, "the first heartbeat", func() bool { return j.Status()[0].Joined })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	j.Stop(ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop took %v with a 50ms context", d)
	}
	if len(f.deleted()) != 1 {
		t.Errorf("no DELETE attempted")
	}
}

func TestJoinerErrors(t *testing.T) {
	checkGoroutines(t)
	f := newFake("r")
	f.errStatus = http.StatusForbidden
	f.reply.IntervalMS = 100
	s := startFake(t, f)
	lb, log := newLog()
	var calls atomic.Int64
	j := StartJoiner(JoinOptions{Parents: []string{s.URL}, Interval: 100 * time.Millisecond, Self: memberSelf(&calls), Log: log})
	t.Cleanup(func() { stop(t, j) })
	waitFor(t, 5*time.Second, "two refused heartbeats", func() bool { return f.beatCount() >= 2 })
	waitFor(t, 5*time.Second, "the error in the status", func() bool { return j.Status()[0].LastError != "" })
	st := j.Status()[0]
	if st.Joined || !strings.Contains(st.LastError, "403") || !strings.Contains(st.LastError, "the fake says no") {
		t.Errorf("status %+v", st)
	}
	if n := lb.count("level=WARN msg=\"cannot join redirector\""); n != 1 {
		t.Errorf("%d warnings for repeated failures:\n%s", n, lb.buf.String())
	}

	// A member whose own description is invalid sends nothing.
	g := newFake("g")
	sg := startFake(t, g)
	j2 := StartJoiner(JoinOptions{Parents: []string{sg.URL}, Self: func() Member { return Member{ID: "x", Role: RoleServer} }})
	waitFor(t, 5*time.Second, "the error in the status", func() bool { return j2.Status()[0].LastError != "" })
	if !strings.Contains(j2.Status()[0].LastError, "invalid") || g.beatCount() != 0 {
		t.Errorf("status %+v, %d heartbeats", j2.Status()[0], g.beatCount())
	}
	stop(t, j2)
}

// A redirector that restarts (on the same address, with no memory) has the
// member back at its next heartbeat; the member logs the loss once and the
// rejoin.
func TestJoinerRecovers(t *testing.T) {
	checkGoroutines(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	f := newFake("r")
	f.reply.IntervalMS = 100
	s := serveOn(t, ln, f)
	lb, log := newLog()
	var calls atomic.Int64
	j := StartJoiner(JoinOptions{Parents: []string{"http://" + addr}, Interval: time.Hour, Self: memberSelf(&calls), Log: log})
	t.Cleanup(func() { stop(t, j) })
	waitFor(t, 5*time.Second, "joined", func() bool { return j.Status()[0].Joined })

	s.Close()
	waitFor(t, 5*time.Second, "the loss", func() bool { return !j.Status()[0].Joined })
	before := calls.Load()
	waitFor(t, 5*time.Second, "two more failed attempts", func() bool { return calls.Load() >= before+2 })
	if st := j.Status()[0]; st.LastError == "" || st.Interval != 100*time.Millisecond {
		t.Errorf("status while down %+v", st)
	}

	var ln2 net.Listener
	waitFor(t, 5*time.Second, "the address to be free again", func() bool {
		ln2, err = net.Listen("tcp", addr)
		return err == nil
	})
	f2 := newFake("r-restarted")
	serveOn(t, ln2, f2)
	waitFor(t, 5*time.Second, "rejoined", func() bool { return j.Status()[0].Joined && f2.beatCount() >= 1 })
	if st := j.Status()[0]; st.Redirector != "r-restarted" || st.LastError != "" {
		t.Errorf("status after restart %+v", st)
	}
	if n := lb.count(`level=WARN msg="lost redirector"`); n != 1 {
		t.Errorf("%d loss warnings:\n%s", n, lb.buf.String())
	}
	if n := lb.count(`level=INFO msg="joined redirector"`); n != 2 {
		t.Errorf("%d join messages:\n%s", n, lb.buf.String())
	}
	if lb.count(`level=DEBUG msg="heartbeat failed"`) < 1 {
		t.Errorf("repeated failures not logged at debug:\n%s", lb.buf.String())
	}
}

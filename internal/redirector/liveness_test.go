package redirector

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// watchers is how many persistent connections the registry counts.
func (tr *testRedirector) watchers() int {
	tr.Redirector.reg.mu.RLock()
	defer tr.Redirector.reg.mu.RUnlock()
	n := 0
	for _, c := range tr.Redirector.reg.watchers {
		n += c
	}
	return n
}

// hasMember reports whether id is registered.
func (tr *testRedirector) hasMember(id string) bool { return tr.Redirector.reg.has(id) }

// openWatch holds a watch request for m; cancel closes its connection.
func openWatch(t *testing.T, tr *testRedirector, m fed.Member) (status int, closeIt func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tp := &http.Transport{}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tr.srv.URL+fed.WatchPath+"?id="+m.ID+"&instance="+m.Instance, nil)
	resp, err := (&http.Client{Transport: tp}).Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp.StatusCode, func() { cancel(); resp.Body.Close(); tp.CloseIdleConnections() }
}

// A member whose persistent connection closes is dropped at once, with
// what it told forgotten: not after the heartbeat miss limit.
func TestWatchClosedDropsMemberAtOnce(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Heartbeat: time.Second, MissLimit: 30})
	a, b := newFakeMember(t, "/store/x"), newFakeMember(t, "/store/x")
	tr.Heartbeat(a.member())
	tr.Heartbeat(b.member())
	if st, _ := openWatch(t, tr, fed.Member{ID: "nobody", Instance: "x"}); st != http.StatusNotFound {
		t.Errorf("watch of an unknown member: %d, want 404", st)
	}
	st, closeA := openWatch(t, tr, a.member())
	if st != http.StatusOK {
		t.Fatalf("watch: %d", st)
	}
	// A second connection of the same instance: closing one keeps it.
	_, closeA2 := openWatch(t, tr, a.member())
	eventually(t, "two watches counted", func() bool { return tr.watchers() == 2 })
	tr.location(t, "/store/x") // both answers cached
	closeA2()
	eventually(t, "one watch left", func() bool { return tr.watchers() == 1 })
	if !tr.hasMember(a.srv.URL) {
		t.Fatal("a dropped while a connection of it is open")
	}
	start := time.Now()
	closeA()
	eventually(t, "a dropped", func() bool { return !tr.hasMember(a.srv.URL) })
	if d := time.Since(start); d > time.Second {
		t.Errorf("dropped %v after its connection closed, want well under a second", d)
	}
	for range 20 {
		if loc := tr.location(t, "/store/x"); !strings.HasPrefix(loc, b.srv.URL) {
			t.Fatalf("after a's connection closed: Location %s", loc)
		}
	}
	if counter(t, tr.reg, "wanda_redirector_members_lost_total") != 1 {
		t.Error("the loss is not counted")
	}
	// A restarted a (a new instance) joins again with its heartbeat; the
	// old instance's connection closing later does not drop it.
	m := a.member()
	m.Instance = "two"
	tr.Heartbeat(m)
	if !tr.hasMember(a.srv.URL) {
		t.Fatal("a's new instance not registered")
	}
}

// A member nothing listens for is dropped the first time the redirector
// cannot connect to it; clients go to the other replica.
func TestUnreachableMemberDropped(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Heartbeat: time.Second, MissLimit: 30, Window: 200 * time.Millisecond})
	b := newFakeMember(t, "/store/y")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	tr.Heartbeat(fed.Member{Version: fed.Version, ID: dead, Instance: "one", Role: fed.RoleServer, URL: dead, Exports: []fed.Export{{Prefix: "/store"}}})
	tr.Heartbeat(b.member())
	if loc := tr.location(t, "/store/y"); !strings.HasPrefix(loc, b.srv.URL) {
		t.Fatalf("Location %s", loc)
	}
	eventually(t, "the dead member dropped", func() bool { return !tr.hasMember(dead) })
	if !tr.hasMember(b.srv.URL) {
		t.Fatal("the live member was dropped")
	}
}

// crashable is a transport whose connections a test can cut at once and
// refuse afterwards, as the death of a process does.
type crashable struct {
	mu    sync.Mutex
	conns []net.Conn
	down  atomic.Bool
}

func (c *crashable) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.down.Load() {
		return nil, errors.New("crashed")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *crashable) crash() {
	c.down.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// A Joiner holds its persistent connection; when the member "crashes"
// (every connection cut, no DELETE) the redirector drops it at once; when
// it comes back its heartbeat and connection return.
func TestJoinerWatchCrashAndReturn(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Heartbeat: 200 * time.Millisecond, MissLimit: 50})
	a := newFakeMember(t, "/store/z")
	cr := &crashable{}
	j := fed.StartJoiner(fed.JoinOptions{
		Parents: []string{tr.srv.URL}, Self: func() fed.Member { return a.member() },
		Client: &http.Client{Transport: &http.Transport{DialContext: cr.dial}, Timeout: 5 * time.Second},
	})
	defer j.Stop(context.Background())
	eventually(t, "joined and watching", func() bool { return tr.hasMember(a.srv.URL) && tr.watchers() == 1 })
	start := time.Now()
	cr.crash()
	eventually(t, "dropped after the crash", func() bool { return !tr.hasMember(a.srv.URL) })
	if d := time.Since(start); d > time.Second {
		t.Errorf("dropped %v after the crash (miss limit 10s)", d)
	}
	cr.down.Store(false)
	eventually(t, "back and watching", func() bool { return tr.hasMember(a.srv.URL) && tr.watchers() == 1 })
}

// A silent host keeps its connection open (nothing closes it): it is
// still dropped after the heartbeat miss limit.
func TestSilentMemberWithWatchStillSwept(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Heartbeat: 100 * time.Millisecond, MissLimit: 2})
	a := newFakeMember(t)
	tr.Heartbeat(a.member())
	st, closeA := openWatch(t, tr, a.member())
	defer closeA()
	if st != http.StatusOK {
		t.Fatalf("watch: %d", st)
	}
	start := time.Now()
	eventually(t, "the silent member swept", func() bool { return !tr.hasMember(a.srv.URL) })
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("dropped after %v: before the miss limit", d)
	}
	if tr.watchers() != 1 {
		t.Errorf("%d watches counted, want its one still open", tr.watchers())
	}
}

// A member that stops gracefully leaves before its connection closes: it
// is gone at once and not counted as lost.
func TestJoinerStopLeavesNotLost(t *testing.T) {
	t.Parallel()
	tr := startRedirector(t, Options{Heartbeat: 200 * time.Millisecond, MissLimit: 50})
	a := newFakeMember(t)
	j := fed.StartJoiner(fed.JoinOptions{Parents: []string{tr.srv.URL}, Self: func() fed.Member { return a.member() }})
	eventually(t, "joined and watching", func() bool { return tr.hasMember(a.srv.URL) && tr.watchers() == 1 })
	j.Stop(context.Background())
	if tr.hasMember(a.srv.URL) {
		t.Fatal("still a member after Stop")
	}
	eventually(t, "its connection closed", func() bool { return tr.watchers() == 0 })
	if n := counter(t, tr.reg, "wanda_redirector_members_lost_total"); n != 0 {
		t.Errorf("a member that left counted %v times as lost", n)
	}
}

package cmsd_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fed/cmsd"
	"github.com/wanda-fed/wanda/internal/redirector"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// member is a wanda member's description for an Uplink.
type selfState struct {
	mu      sync.Mutex
	exports []fed.Export
	files   map[string]bool
	drained atomic.Bool
}

func (s *selfState) self() fed.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fed.Member{ID: "http://127.0.0.1:1094", URL: "http://127.0.0.1:1094", Role: fed.RoleServer,
		Exports: s.exports, Load: fed.Load{FreeBytes: 10 << 30, TotalBytes: 20 << 30}, Labels: map[string]string{"site": "T9_Test"}}
}

func (s *selfState) has(_ context.Context, p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[p]
}

func startUplink(t *testing.T, manager string, s *selfState) *cmsd.Uplink {
	t.Helper()
	u := cmsd.StartUplink(cmsd.UplinkOptions{Manager: manager, Self: s.self, Locate: s.has,
		Suspended: s.drained.Load, Interval: 100 * time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		u.Stop(ctx)
	})
	return u
}

// A member's Uplink against wanda's own listener: it logs in with its
// exports and site, answers state, tells gone and have, maps a drain to
// suspend, and logs in again when its exports change.
func TestUplinkConversation(t *testing.T) {
	rd, addr := startListener(t, nil)
	s := &selfState{exports: []fed.Export{{Prefix: "/store"}}, files: map[string]bool{"/store/a": true}}
	u := startUplink(t, addr, s)
	id := "root://127.0.0.1:1094"
	eventually(t, "the uplink to log in", func() bool { _, ok := member(rd, id); return ok })
	m, _ := member(rd, id)
	if m.Labels["site"] != "T9_Test" || m.Load.TotalBytes != 20<<30 || len(m.Exports) != 1 {
		t.Errorf("member %+v", m)
	}
	if st := u.Status(); len(st) != 1 || !st[0].Joined || st[0].URL != "cmsd://"+addr {
		t.Errorf("status %+v", st)
	}
	ctx := context.Background()
	if res := rd.Locate(ctx, redirector.Query{Path: "/store/a"}); res.Status != fed.Found {
		t.Fatalf("state answered: %+v", res)
	}
	if res := rd.Locate(ctx, redirector.Query{Path: "/store/b"}); res.Status != fed.NotFound {
		t.Fatalf("state unanswered: %+v", res)
	}
	u.Notify("/store/a", false)
	eventually(t, "the gone", func() bool {
		return !rd.Locate(ctx, redirector.Query{Path: "/store/a", CacheOnly: true}).Cached
	})
	u.Notify("/store/c", true)
	eventually(t, "the have", func() bool {
		return rd.Locate(ctx, redirector.Query{Path: "/store/c", CacheOnly: true}).Status == fed.Found
	})
	s.drained.Store(true)
	u.Beat()
	eventually(t, "the suspend", func() bool { m, _ := member(rd, id); return m.Drained })
	s.drained.Store(false)
	eventually(t, "the resume", func() bool { m, _ := member(rd, id); return !m.Drained })
	s.mu.Lock()
	s.exports = append(s.exports, fed.Export{Prefix: "/more", ReadOnly: true})
	s.mu.Unlock()
	eventually(t, "a login with the new exports", func() bool { m, _ := member(rd, id); return len(m.Exports) == 2 })
}

// The exports change between the login and the session's first report
// (a redirector's first member joins as it logs in): the session ends
// and the member logs in again with them. It used to stay on with the
// exports of its login, suspended, until the manager went away.
func TestUplinkExportsChangeAtLogin(t *testing.T) {
	rd, addr := startListener(t, nil)
	s := &selfState{exports: []fed.Export{{Prefix: "/store"}}}
	var calls atomic.Int32
	self := func() fed.Member {
		m := s.self()
		if calls.Add(1) > 1 { // the login's own call saw one export
			m.Exports = append(m.Exports, fed.Export{Prefix: "/more", ReadOnly: true})
		}
		return m
	}
	u := cmsd.StartUplink(cmsd.UplinkOptions{Manager: addr, Self: self, Locate: s.has, Interval: time.Hour})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		u.Stop(ctx)
	})
	eventually(t, "a login with the exports of after the first one", func() bool {
		m, ok := member(rd, "root://127.0.0.1:1094")
		return ok && len(m.Exports) == 2
	})
}

// fakeManager runs a manager that reads each login and hands the
// connection to answer; it counts the logins it read.
func fakeManager(t *testing.T, answer func(c net.Conn)) (addr string, logins *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	logins = &atomic.Int32{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if fr, err := cms.ReadFrame(c, nil, cms.MaxLoginData); err == nil && fr.Code == cms.CodeLogin {
					if _, err := cms.ParseLogin(fr.Data); err == nil {
						logins.Add(1)
					}
					answer(c)
				}
			}()
		}
	}()
	return ln.Addr().String(), logins
}

// answerWith answers a login with frame bytes b, then waits for the
// member to close.
func answerWith(b []byte) func(c net.Conn) {
	return func(c net.Conn) {
		_, _ = c.Write(b)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
	}
}

// A manager that answers the login with try sends the member to another.
func TestUplinkFollowsTry(t *testing.T) {
	rd, addr := startListener(t, nil)
	data, _ := cms.TryData([]string{addr})
	f, _ := cms.NewFrame(0, cms.CodeTry, 0, data)
	first, logins := fakeManager(t, answerWith(f.Bytes()))
	startUplink(t, first, &selfState{exports: []fed.Export{{Prefix: "/store"}}})
	eventually(t, "the member to log in where try sent it", func() bool {
		_, ok := member(rd, "root://127.0.0.1:1094")
		return ok
	})
	if logins.Load() == 0 {
		t.Error("no login at the first manager")
	}
}

// A refused login is reported in the status.
func TestUplinkRefused(t *testing.T) {
	f, _ := cms.ErrorResponse(0, cms.ErrEPERM, "host is blacklisted").Frame()
	addr, logins := fakeManager(t, answerWith(f.Bytes()))
	u := startUplink(t, addr, &selfState{exports: []fed.Export{{Prefix: "/store"}}})
	eventually(t, "the refusal in the status", func() bool {
		st := u.Status()[0]
		return !st.Joined && strings.Contains(st.LastError, "blacklisted")
	})
	if logins.Load() == 0 {
		t.Error("no login seen")
	}
}

// A manager that answers the login and then sends garbage (an oversized
// frame) is left, and logged in to again: the member is unharmed.
func TestUplinkHostileManager(t *testing.T) {
	ok, _ := (cms.Login{Version: cms.Version, SID: "m-hostile x"}).Data()
	login, _ := cms.NewFrame(0, cms.CodeLogin, 0, ok)
	bad := append(login.Bytes(), cms.Header{Code: cms.CodeState, DataLen: 0xffff}.Append(nil)...)
	addr, logins := fakeManager(t, answerWith(bad))
	startUplink(t, addr, &selfState{exports: []fed.Export{{Prefix: "/store"}}})
	eventually(t, "a second login after the garbage", func() bool { return logins.Load() >= 2 })
}

package xrdstream_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmontest"
	"github.com/wanda-fed/wanda/internal/monitor/xrdstream"
)

func newStream(t *testing.T, o xrdstream.Options) (*monitor.Recorder, *xrdstream.Stream, *metrics.XRootDMonitor) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.NewXRootDMonitor(reg, "server")
	o.Metrics = m
	if o.Host == "" {
		o.Identity = xrdstream.Identity{Host: "test.example", Port: 1094, Version: "v1"}
	}
	s, err := xrdstream.New(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start("", 0)
	r, err := monitor.New(monitor.Options{Role: "server", Streams: []monitor.Stream{s}, Progress: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, s, m
}

type cacheFile struct{}

func (cacheFile) CacheBlocks() (int64, int, int) { return 1 << 20, 3, 2 }

// A root:// session with a read (reads, a readv) and an upload, an HTTP
// connection with a GET of a cached file, a redirection: every stream
// the options ask for carries them, joined by their dictionary ids.
func TestStreams(t *testing.T) {
	col := xrdmontest.Listen(t)
	r, s, m := newStream(t, xrdstream.Options{
		Dests: []string{col.Addr()}, Files: true, IO: true, FStat: true, Info: true, User: true, Redir: true, Cache: true,
		Auth: true, FStatInterval: 50 * time.Millisecond, LFN: true, Ops: true, Xfr: 1, Flush: 50 * time.Millisecond,
		BlockSize: 1 << 20, Remotes: []string{"origin.example:1094"},
	})
	sess := r.NewSession(monitor.SessionInfo{Protocol: "xroot", Name: "alice", PID: 42, Client: "127.0.0.1:5000", Login: "&R=v5&x=xrdcp&y="})
	sess.SetUser("ztn", "alice@example.org")
	if id := sess.Info("appinfo text"); id == 0 {
		t.Error("Info handed out no dictionary id")
	}
	a := r.Start(monitor.Begin{Protocol: "root", Op: "read", Path: "/store/a.root", Client: "127.0.0.1:5000", Session: sess})
	a.SetSize(10000)
	a.Opened()
	a.ReadAt(0, 1000)
	a.ReadAt(1000, 3000)
	a.ReadV(3, 600)
	// An xfr record reports an open file's bytes while it stays open.
	xrdmontest.Wait(t, 5*time.Second, "an xfr record", func() bool {
		tr := col.View().Find("/store/a.root")
		return tr != nil && tr.Xfrs > 0
	})
	a.End()
	w := r.Start(monitor.Begin{Protocol: "root", Op: "write", Path: "/store/up.bin", Client: "127.0.0.1:5000", Session: sess})
	w.SetSize(0)
	w.Opened()
	w.WriteAt(0, 4096)
	w.Fail(monitor.ClassClosed, 0)
	w.End()
	sess.End()

	h := r.NewSession(monitor.SessionInfo{Protocol: "https", PID: 1, Client: "[2001:db8::1]:443"})
	g := r.Start(monitor.Begin{Protocol: "https", Op: "GET", Path: "/cached/f", Client: "[2001:db8::1]:443", Session: h})
	g.SetSize(2 << 20)
	g.CacheFile(cacheFile{})
	g.Opened()
	g.Read(2 << 20)
	g.CacheBytes(1<<20, 1<<20)
	g.End()
	rd := r.Start(monitor.Begin{Protocol: "https", Op: "GET", Path: "/store/x", Client: "[2001:db8::1]:443", Session: h})
	rd.SetRedirect("https://server.example:8443/store/x")
	rd.Succeed(monitor.ResultRedirect, 307)
	rd.End()
	h.End()

	var v *xrdmontest.View
	defer func() {
		if t.Failed() && v != nil {
			t.Logf("redirects %+v g %v transfers %d users %+v", v.Redirects, v.GLines, len(v.Transfers), v.Users)
			for _, tr := range v.Transfers {
				t.Logf("transfer %+v user %+v", tr, tr.User)
			}
		}
	}()
	xrdmontest.Wait(t, 5*time.Second, "every record", func() bool {
		v = col.View()
		return len(v.Redirects) == 1 && len(v.GLines) == 1 && len(v.Transfers) == 3 && v.Find("/cached/f").Closed &&
			len(v.Users) == 2 && v.Users[v.Find("/cached/f").User.DictID].Disc && v.Users[v.Find("/store/a.root").User.DictID].Disc
	})
	if errs := col.Errors(); len(errs) > 0 {
		t.Fatalf("undecodable packets: %v", errs)
	}
	if v.Server == nil || !strings.Contains(v.Server.Info, "&pgm=wanda&ver=v1") || !strings.HasSuffix(v.Server.Ident, "@test.example") {
		t.Errorf("server ident: %+v", v.Server)
	}
	rt := v.Find("/store/a.root")
	if rt.User == nil || rt.User.Ident.Protocol != "xroot" || rt.User.Ident.User != "alice" || rt.User.Ident.PID != "42" ||
		rt.User.Ident.Host != "127.0.0.1" {
		t.Fatalf("read's user: %+v", rt.User)
	}
	if want := "&p=ztn&n=alice@example.org&h=127.0.0.1&o=&r=&g=&m=alice@example.org&R=v5&x=xrdcp&y=&I=4"; rt.User.Info != want {
		t.Errorf("user info %q, want %q", rt.User.Info, want)
	}
	if rt.Size != 10000 || rt.RW || rt.Xfr != (xrdmon.Xfr{Read: 4000, Readv: 600}) || !rt.HasOps || rt.Forced ||
		rt.Ops.Read != 2 || rt.Ops.Readv != 1 || rt.Ops.Rsegs != 3 || rt.Ops.RdMin != 1000 || rt.Ops.RdMax != 3000 ||
		rt.Ops.RvMin != 600 || rt.Ops.RsMax != 3 {
		t.Errorf("read: %+v", rt)
	}
	up := v.Find("/store/up.bin")
	if !up.RW || !up.Forced || up.Xfr.Write != 4096 || up.Ops.WrMax != 4096 {
		t.Errorf("upload: %+v", up)
	}
	ct := v.Find("/cached/f")
	if ct.User.Ident.Protocol != "https" || ct.User.Ident.User != "unknown" || ct.User.Ident.Host != "[2001:db8::1]" ||
		!strings.HasSuffix(ct.User.Info, "&I=6") || ct.Xfr.Read != 2<<20 {
		t.Errorf("https GET: %+v %+v", ct, ct.User)
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(v.GLines[0]), &ev); err != nil {
		t.Fatal(err)
	}
	if ev["event"] != "file_close" || ev["lfn"] != "/cached/f" || ev["b_hit"] != float64(1<<20) || ev["b_miss"] != float64(1<<20) ||
		ev["n_blks"] != float64(3) || ev["n_blks_done"] != float64(2) || ev["access_cnt"] != float64(1) || ev["blk_size"] != float64(1<<20) {
		t.Errorf("g-stream record: %v", ev)
	}
	rr := v.Redirects[0]
	if rr.Host != "server.example" || rr.Port != 8443 || rr.Path != "/store/x" || rr.Op != xrdmon.OpOpenR || rr.UserID != ct.User.DictID {
		t.Errorf("redirect: %+v", rr)
	}
	if len(v.Info) != 1 || v.Info[0].Info != "appinfo text" {
		t.Errorf("info records: %+v", v.Info)
	}
	// The trace stream: 'd' records name the files; opens, io, closes,
	// disconnections.
	codes := map[byte]int{}
	for _, e := range v.Trace {
		codes[e.Code]++
	}
	if codes[xrdmon.TraceOpen] != 3 || codes[xrdmon.TraceClose] != 3 || codes[xrdmon.TraceRead] != 2 || codes[xrdmon.TraceWrite] != 1 ||
		codes[xrdmon.TraceReadV] != 1 || codes[xrdmon.TraceDisc] != 2 || codes[xrdmon.TraceWindow] < 2 || len(v.Paths) != 3 {
		t.Errorf("trace entries by code: %v, paths %v", codes, v.Paths)
	}
	if s.SID() == 0 {
		t.Error("no server id")
	}
	if n := testutil.ToFloat64(m.Packets.WithLabelValues("f")); n < 1 {
		t.Errorf("f packets counted: %v", n)
	}
}

// A full queue drops events and counts them; the data path does not
// wait.
func TestQueueFull(t *testing.T) {
	col := xrdmontest.Listen(t)
	r, _, m := newStream(t, xrdstream.Options{Dests: []string{col.Addr()}, FStat: true, User: true, FStatInterval: time.Second,
		Queue: 1, Resolve: true})
	sess := r.NewSession(monitor.SessionInfo{Protocol: "xroot", Name: "bob", PID: 1, Client: "127.0.0.1:1"})
	start := time.Now()
	for range 10000 {
		a := r.Start(monitor.Begin{Protocol: "root", Op: "read", Path: "/f", Session: sess})
		a.Opened()
		a.End()
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("10000 accesses took %v", d)
	}
	if n := testutil.ToFloat64(m.Dropped.WithLabelValues("queue_full")); n == 0 {
		t.Error("no event dropped with a queue of 1")
	}
}

// An ended session whose disconnect was dropped is still reported.
func TestDiscSwept(t *testing.T) {
	col := xrdmontest.Listen(t)
	r, s, _ := newStream(t, xrdstream.Options{Dests: []string{col.Addr()}, FStat: true, User: true, FStatInterval: 20 * time.Millisecond,
		Flush: 20 * time.Millisecond})
	sess := r.NewSession(monitor.SessionInfo{Protocol: "xroot", Name: "carol", PID: 1, Client: "127.0.0.1:1"})
	a := r.Start(monitor.Begin{Protocol: "root", Op: "read", Path: "/g", Session: sess})
	a.Opened()
	// The session ends (its event lost), then the file closes.
	sess.End()
	a.End()
	_ = s
	xrdmontest.Wait(t, 5*time.Second, "carol's disconnection", func() bool {
		for _, u := range col.View().Users {
			if u.Ident.User == "carol" && u.Disc {
				return true
			}
		}
		return false
	})
}

// The data path's cost of an access (start, open, two reads, end) with
// records to a file only, and with XRootD's stream too (default
// settings: the file stream with paths and operations, users).
func BenchmarkAccess(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "records"
		if stream {
			name = "records+stream"
		}
		b.Run(name, func(b *testing.B) {
			o := monitor.Options{Role: "server", File: monitor.FileOptions{Path: b.TempDir() + "/r.jsonl"}, Progress: -1}
			if stream {
				col := xrdmontest.Listen(b)
				s, err := xrdstream.New(xrdstream.Options{Dests: []string{col.Addr()}, FStat: true, User: true, Info: true, Redir: true,
					Auth: true, FStatInterval: time.Minute, LFN: true, Ops: true, Xfr: 5, Identity: xrdstream.Identity{Host: "bench", Port: 1}})
				if err != nil {
					b.Fatal(err)
				}
				s.Start("", 0)
				o.Streams = []monitor.Stream{s}
			}
			r, err := monitor.New(o)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			sess := r.NewSession(monitor.SessionInfo{Protocol: "http", PID: 1, Client: "127.0.0.1:1"})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a := r.Start(monitor.Begin{Protocol: "http", Op: "GET", Path: "/store/data/file.root", Client: "127.0.0.1:1", Session: sess})
					a.SetSize(1 << 20)
					a.Opened()
					a.ReadAt(0, 4096)
					a.ReadAt(4096, 4096)
					a.Succeed(monitor.ResultOK, 200)
					a.End()
				}
			})
		})
	}
}

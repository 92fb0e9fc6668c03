package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmontest"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// monitorData writes the files both servers serve.
func monitorData(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int{"read.bin": 3<<20 + 11, "readv.bin": 1 << 20, "web.txt": 4321} {
		if err := os.WriteFile(filepath.Join(dir, "data", name), randomBytes(n, uint64(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// xrootdPython is a Python that imports XRootD's bindings.
func xrootdPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if _, err := exec.LookPath(py); err != nil {
			continue
		}
		if r := runFor(t, time.Minute, "", py, "-c", "import XRootD"); r.Err == nil {
			return py
		}
	}
	missing(t, "no python3 imports XRootD (apt install python3-xrootd, or pip install xrootd)")
	return ""
}

// pyVectorRead opens fileURL with XRootD's Python bindings, reads three
// 16-byte segments (at 0, 4096 and 1048560) in one vector read, and
// closes it.
func pyVectorRead(t *testing.T, py, dir, fileURL string) {
	t.Helper()
	script := `
import sys
from XRootD import client
f = client.File()
st, _ = f.open(sys.argv[1])
assert st.ok, st
st, res = f.vector_read([(0, 16), (4096, 16), (1048560, 16)])
assert st.ok, st
f.close()
`
	if r := runFor(t, time.Minute, dir, py, "-c", script, fileURL); r.Err != nil {
		t.Fatalf("python vector_read: %v\n%s", r.Err, r.Stderr)
	}
}

// monitoredAccesses makes the same accesses against a server: an xrdcp
// read, a vector read (XRootD's Python bindings), an xrdcp upload, an
// HTTP GET; each client ends before the next starts.
func monitoredAccesses(t *testing.T, root, web, py string) {
	t.Helper()
	dir := t.TempDir()
	mustRun(t, dir, "xrdcp", "-f", root+"/data/read.bin", filepath.Join(dir, "read.bin"))
	pyVectorRead(t, py, dir, root+"/data/readv.bin")
	up := filepath.Join(dir, "up.bin")
	if err := os.WriteFile(up, randomBytes(1<<20+7, 5), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, "xrdcp", "-f", up, root+"/data/up.bin")
	if r := curl(t, web+"/data/web.txt"); r.Status != 200 || len(r.Body) != 4321 {
		t.Fatalf("curl GET: %d, %d bytes", r.Status, len(r.Body))
	}
}

// monitoredView waits until a collector has the four accesses closed and
// their four users disconnected.
func monitoredView(t *testing.T, who string, col *xrdmontest.Collector) *xrdmontest.View {
	t.Helper()
	var v *xrdmontest.View
	xrdmontest.Wait(t, 30*time.Second, who+"'s monitoring of the four accesses", func() bool {
		v = col.View()
		closed, disc := 0, 0
		for _, tr := range v.Transfers {
			if tr.Closed {
				closed++
			}
		}
		for _, u := range v.Users {
			if u.Disc {
				disc++
			}
		}
		return closed >= 4 && disc >= 4
	})
	if errs := col.Errors(); len(errs) > 0 {
		t.Errorf("%s: packets the decoder refused: %v", who, errs)
	}
	return v
}

// fileRecords counts a view's file-stream records by type.
func fileRecords(col *xrdmontest.Collector) map[string]int {
	names := map[byte]string{xrdmon.RecOpen: "open", xrdmon.RecClose: "close", xrdmon.RecDisc: "disc", xrdmon.RecXfr: "xfr"}
	n := map[string]int{}
	for _, p := range col.Packets() {
		if p.File != nil {
			for _, r := range p.File.Recs {
				n[names[r.Type]]++
			}
		}
	}
	return n
}

// summaryKeys is the keys of a collector's last summary, with their
// values.
func summaryKeys(t *testing.T, who string, col *xrdmontest.Collector) map[string]string {
	t.Helper()
	xrdmontest.Wait(t, 30*time.Second, who+"'s summary", func() bool { return len(col.Summaries()) > 0 })
	s := col.Summaries()
	m := map[string]string{}
	for _, kv := range s[len(s)-1] {
		m[kv.Key] = kv.Value
	}
	return m
}

// The test: XRootD 5.5 with `xrootd.monitor` and `xrd.report`
// and wanda with the same settings take the same accesses; both streams
// decode with wanda's decoder, and compare record by record: the same
// record types, paths, users, byte counts (writes within pgwrite's CRC
// framing, which XRootD counts), operation counts; the summaries have
// the same keys.
func TestXRootDMonitoringAsXRootD(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "curl")
	py := xrootdPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	xcol, xsum := xrdmontest.Listen(t), xrdmontest.Listen(t)
	xdir := filepath.Join(t.TempDir(), "xrootd")
	monitorData(t, xdir)
	xs, err := xrdpeer.Start(ctx, xrdpeer.Options{Dir: xdir, Writable: true, HTTP: true, Monitor: xcol.Addr(), Report: xsum.Addr()})
	if err != nil {
		if errors.Is(err, xrdpeer.ErrNotInstalled) {
			missing(t, err.Error())
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { xs.Close() })

	wcol, wsum := xrdmontest.Listen(t), xrdmontest.Listen(t)
	wdir := t.TempDir()
	monitorData(t, wdir)
	ws := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		// xrootd.monitor all flush 1s fstat 1s lfn ops xfr 5 dest fstat info user redir; xrd.report every 2s all
		m := &c.Monitoring.XRootD
		m.Destinations, m.Report, m.ReportInterval = []string{wcol.Addr()}, []string{wsum.Addr()}, config.Interval(2*time.Second)
		m.FStat, m.LFN, m.Ops, m.Xfr, m.Flush = config.Interval(time.Second), true, true, 5, config.Interval(time.Second)
		m.User, m.Info, m.Redir, m.Auth, m.Files, m.IO = true, true, true, false, false, false
	}}, config.Export{Prefix: "/", Path: wdir})

	monitoredAccesses(t, "root://"+xs.Addr+"/", xs.HTTP, py)
	monitoredAccesses(t, rootURL(ws.URL), ws.URL, py)
	xv, wv := monitoredView(t, "xrootd", xcol), monitoredView(t, "wanda", wcol)

	// Record types: the packets' codes, the file stream's records.
	codes := func(v *xrdmontest.View) string {
		var cs []string
		for c := range v.Codes {
			cs = append(cs, string(c))
		}
		sort.Strings(cs)
		return strings.Join(cs, "")
	}
	if codes(xv) != codes(wv) {
		t.Errorf("packet codes: xrootd %q, wanda %q", codes(xv), codes(wv))
	}
	xf, wf := fileRecords(xcol), fileRecords(wcol)
	for _, k := range []string{"open", "close", "disc"} {
		if xf[k] != wf[k] {
			t.Errorf("file-stream %s records: xrootd %d, wanda %d", k, xf[k], wf[k])
		}
	}
	t.Logf("file-stream records: xrootd %v, wanda %v", xf, wf)
	if xv.Server == nil || wv.Server == nil {
		t.Fatalf("server identification: xrootd %v, wanda %v", xv.Server, wv.Server)
	}
	xk, wk := xrdmon.CGI(xv.Server.Info), xrdmon.CGI(wv.Server.Info)
	if len(xk) != len(wk) {
		t.Errorf("server identification keys: xrootd %q, wanda %q", xk, wk)
	}
	for i := range min(len(xk), len(wk)) {
		if xk[i][0] != wk[i][0] {
			t.Errorf("server identification key %d: xrootd %q, wanda %q", i, xk[i][0], wk[i][0])
		}
	}

	// Record by record, by path.
	for _, path := range []string{"/data/read.bin", "/data/readv.bin", "/data/up.bin", "/data/web.txt"} {
		x, w := xv.Find(path), wv.Find(path)
		if x == nil || w == nil {
			t.Errorf("%s: xrootd %+v, wanda %+v", path, x, w)
			continue
		}
		t.Logf("%s:\n  xrootd %+v %+v\n  wanda  %+v %+v", path, *x, x.User, *w, w.User)
		if !x.Closed || !w.Closed || x.RW != w.RW || x.Size != w.Size || x.Forced != w.Forced || x.HasOps != w.HasOps {
			t.Errorf("%s: open/close differ", path)
		}
		if x.User == nil || w.User == nil {
			t.Errorf("%s: no user record (xrootd %v, wanda %v)", path, x.User, w.User)
		} else if x.User.Ident.Protocol != w.User.Ident.Protocol || x.User.Ident.User != w.User.Ident.User || x.User.Info != w.User.Info ||
			x.User.Ident.Host != w.User.Ident.Host {
			t.Errorf("%s: users differ: xrootd %+v, wanda %+v", path, *x.User, *w.User)
		}
		if x.Xfr.Read != w.Xfr.Read || x.Xfr.Readv != w.Xfr.Readv {
			t.Errorf("%s: bytes read differ: xrootd %+v, wanda %+v", path, x.Xfr, w.Xfr)
		}
		// XRootD counts a pgwrite's CRC32C (4 bytes a page) as written.
		if d := x.Xfr.Write - w.Xfr.Write; d < 0 || d > 4*(w.Xfr.Write/4096+2) {
			t.Errorf("%s: bytes written differ beyond framing: xrootd %d, wanda %d", path, x.Xfr.Write, w.Xfr.Write)
		}
		if x.Ops.Read != w.Ops.Read || x.Ops.Readv != w.Ops.Readv || x.Ops.Write != w.Ops.Write || x.Ops.Rsegs != w.Ops.Rsegs {
			t.Errorf("%s: operations differ: xrootd %+v, wanda %+v", path, x.Ops, w.Ops)
		}
	}

	// The summaries: the same keys; the counters both keep agree.
	xk2, wk2 := summaryKeys(t, "xrootd", xsum), summaryKeys(t, "wanda", wsum)
	var onlyX, onlyW []string
	for k := range xk2 {
		if _, ok := wk2[k]; !ok {
			onlyX = append(onlyX, k)
		}
	}
	for k := range wk2 {
		if _, ok := xk2[k]; !ok {
			onlyW = append(onlyW, k)
		}
	}
	slices.Sort(onlyX)
	slices.Sort(onlyW)
	if len(onlyX)+len(onlyW) > 0 {
		t.Errorf("summary keys only xrootd has: %v; only wanda has: %v", onlyX, onlyW)
	}
	if wk2["pgm"] != "wanda" || wk2["ofs.role"] != "server" || wk2["oss.paths.0.lp"] != "/" {
		t.Errorf("wanda's summary: %v", wk2)
	}
	for _, k := range []string{"xrootd.ops.open", "xrootd.ops.rv", "link.tot", "xrootd.lgn.num"} {
		t.Logf("summary %s: xrootd %s, wanda %s", k, xk2[k], wk2[k])
	}
	if xk2["xrootd.ops.open"] != wk2["xrootd.ops.open"] || xk2["xrootd.ops.rv"] != wk2["xrootd.ops.rv"] {
		t.Errorf("summary opens, readvs: xrootd %s %s, wanda %s %s", xk2["xrootd.ops.open"], xk2["xrootd.ops.rv"],
			wk2["xrootd.ops.open"], wk2["xrootd.ops.rv"])
	}
}

// freeUDPPort is a UDP port that was free a moment ago (for a peer that
// binds its own: mpxstats).
func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// XRootD's own mpxstats reads wanda's summary stream: every line it
// prints of wanda's report, flattened, is a key XRootD reports.
func TestMpxstatsReadsWandaSummary(t *testing.T) {
	bin := requireTool(t, "mpxstats")
	port := freeUDPPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-f", "flat", "-p", strconv.Itoa(port))
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		lines = map[string]string{}
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), " ")
			mu.Lock()
			lines[k] = v
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	dir := t.TempDir()
	monitorData(t, dir)
	ws := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		c.Monitoring.XRootD.Report, c.Monitoring.XRootD.ReportInterval = []string{fmt.Sprintf("127.0.0.1:%d", port)}, config.Interval(time.Second)
	}}, config.Export{Prefix: "/", Path: dir})
	if r := curl(t, ws.URL+"/data/web.txt"); r.Status != 200 {
		t.Fatalf("GET: %d", r.Status)
	}
	waitFor(t, 30*time.Second, "mpxstats to print wanda's report", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lines["pgm"] == "wanda" && lines["sgen.toe"] != "" && lines["xrootd.ops.open"] != "" && lines["xrootd.ops.open"] != "0"
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"info.port", "link.num", "link.tot", "proc.usr.s", "xrootd.ops.rd", "ofs.role", "oss.paths.0.rp", "sched.threads"} {
		if _, ok := lines[k]; !ok {
			t.Errorf("mpxstats printed no %s: %v", k, lines)
		}
	}
	if lines["ofs.role"] != "server" || lines["oss.paths.0.lp"] != "/" || !strings.HasSuffix(lines["oss.paths.0.rp"], "/") {
		t.Errorf("mpxstats: %v", lines)
	}
	if s := stderr.String(); s != "" {
		t.Logf("mpxstats stderr: %s", s)
	}
}

// The contract: --monitor-udp HOST:PORT (repeatable) and --report-udp
// HOST:PORT on the server, cache and redirector roles of the built
// binary; GET /.well-known/srr on each.
func TestMonitoringBinaryFlags(t *testing.T) {
	exe := wandaBinary(t)
	requireTool(t, "curl")
	dir := t.TempDir()
	monitorData(t, dir)
	a, b, sum := xrdmontest.Listen(t), xrdmontest.Listen(t), xrdmontest.Listen(t)
	flags := func(cols ...*xrdmontest.Collector) []string {
		var f []string
		for _, c := range cols {
			f = append(f, "--monitor-udp", c.Addr())
		}
		return append(f, "--report-udp", sum.Addr())
	}
	srv := testproc.StartExe(t, exe, cleanEnv(), append([]string{"server", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--export", "/=" + dir}, flags(a, b)...)...)
	rdr := testproc.StartExe(t, exe, cleanEnv(), append([]string{"redirector", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--member", srv.URL + "=/data"}, flags(a)...)...)
	cch := testproc.StartExe(t, exe, cleanEnv(), append([]string{"cache", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--upstream", srv.URL, "--dir", t.TempDir()}, flags(b)...)...)
	if r := curl(t, srv.URL+"/data/web.txt"); r.Status != 200 {
		t.Fatalf("server GET: %d", r.Status)
	}
	if r := curl(t, rdr.URL+"/data/web.txt"); r.Status != 307 {
		t.Fatalf("redirector GET: %d", r.Status)
	}
	if r := curl(t, cch.URL+"/data/web.txt"); r.Status != 200 {
		t.Fatalf("cache GET: %d", r.Status)
	}
	// xrdcp through the redirector: redirected over root:// to the server.
	requireTool(t, "xrdcp")
	mustRun(t, dir, "xrdcp", "-f", rootURL(rdr.URL)+"/data/web.txt", filepath.Join(t.TempDir(), "web.txt"))
	for _, col := range []*xrdmontest.Collector{a, b} {
		xrdmontest.Wait(t, 30*time.Second, "the server's user and identification", func() bool {
			v := col.View()
			return v.Server != nil && len(v.Users) > 0
		})
	}
	// The defaults flush the file stream every minute: the redirector's
	// redirection and the cache's records come at their flush, on Stop.
	rdr.Stop()
	cch.Stop()
	xrdmontest.Wait(t, 30*time.Second, "the redirections of curl and xrdcp", func() bool { return len(a.View().Redirects) >= 2 })
	for _, r := range a.View().Redirects {
		if r.Path != "/data/web.txt" || r.Host != "127.0.0.1" || r.Op != xrdmon.OpOpenR || "127.0.0.1:"+strconv.Itoa(int(r.Port)) != strings.TrimPrefix(srv.URL, "http://") {
			t.Errorf("redirection %+v: want the server's /data/web.txt", r)
		}
	}
	xrdmontest.Wait(t, 30*time.Second, "the cache's access", func() bool { return len(b.View().GLines) > 0 })
	for _, u := range []string{srv.URL} {
		r := curl(t, u+"/.well-known/srr")
		if r.Status != 200 || !strings.Contains(string(r.Body), `"implementation": "wanda"`) {
			t.Errorf("%s/.well-known/srr: %d %s", u, r.Status, r.Body)
		}
	}
	if errs := append(a.Errors(), b.Errors()...); len(errs) > 0 {
		t.Errorf("undecodable packets: %v", errs)
	}
}

package xrdstream

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
)

// ReporterOptions configure a Reporter: XRootD's summary stream
// (`xrd.report DEST every INTERVAL all`), built from a role's metrics.
type ReporterOptions struct {
	Dests []string
	// Every is the time between reports (default 60 s).
	Every time.Duration
	// Gatherer holds the role's metrics (wanda_http_*, wanda_xrootd_*,
	// wanda_buffer_*).
	Gatherer prometheus.Gatherer
	// Role is the role ("server", "cache", "redirector"): ofs.role says
	// "server", "server" (a cache is a data server with a proxy) or
	// "manager".
	Role string
	// Paths are the directories whose space the oss section reports
	// (statfs), with their logical names.
	Paths []Path
	// Identity is who reports.
	Identity
	Metrics *metrics.XRootDMonitor
	Log     *slog.Logger
}

// Path is an exported directory: its logical prefix and local path.
type Path struct{ Logical, Local string }

// Reporter sends a summary every interval, from its own goroutine.
type Reporter struct {
	o     ReporterOptions
	conn  *net.UDPConn
	dests []*net.UDPAddr
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// maxima sampled at each report.
	mu             sync.Mutex
	maxConn, maxIn float64
	lastErr        time.Time
}

// NewReporter opens the destinations and starts reporting.
func NewReporter(o ReporterOptions) (*Reporter, error) {
	if len(o.Dests) == 0 {
		return nil, errors.New("xrootd summary: no destination")
	}
	if o.Every <= 0 {
		o.Every = time.Minute
	}
	o.Identity.defaults()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &Reporter{o: o, stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	if r.conn, r.dests, err = openUDP(o.Dests); err != nil {
		return nil, fmt.Errorf("xrootd summary: %w", err)
	}
	go r.run()
	return r, nil
}

// Close stops the reports.
func (r *Reporter) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func (r *Reporter) run() {
	defer close(r.done)
	defer r.conn.Close()
	t := time.NewTicker(r.o.Every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.send(r.Report(time.Now()))
		case <-r.stop:
			return
		}
	}
}

func (r *Reporter) send(doc []byte) {
	for i, d := range r.dests {
		if _, err := r.conn.WriteToUDP(doc, d); err != nil {
			if r.o.Metrics != nil {
				r.o.Metrics.Dropped.WithLabelValues("send_error").Inc()
			}
			if now := time.Now(); now.Sub(r.lastErr) >= time.Minute {
				r.lastErr = now
				r.o.Log.Warn("xrootd summary: a report was not sent", "dest", r.o.Dests[i], "err", err)
			}
			continue
		}
		if m := r.o.Metrics; m != nil {
			m.Packets.WithLabelValues("summary").Inc()
			m.Bytes.WithLabelValues("summary").Add(float64(len(doc)))
		}
	}
}

// zeros writes values wanda has no counter for (0).
func zeros(w *xrdmon.XMLWriter, names ...string) {
	for _, n := range names {
		w.Int(n, 0)
	}
}

// gathered is the role's metrics by name.
type gathered map[string]*dto.MetricFamily

func (g gathered) sum(name string, keep func(labels map[string]string) bool) float64 {
	f := g[name]
	if f == nil {
		return 0
	}
	var v float64
	for _, m := range f.Metric {
		if keep != nil {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if !keep(l) {
				continue
			}
		}
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Untyped != nil:
			v += m.Untyped.GetValue()
		}
	}
	return v
}

func is(key string, values ...string) func(map[string]string) bool {
	return func(l map[string]string) bool {
		for _, v := range values {
			if l[key] == v {
				return true
			}
		}
		return false
	}
}

func not(f func(map[string]string) bool) func(map[string]string) bool {
	return func(l map[string]string) bool { return !f(l) }
}

func httpCode(ok func(code int) bool) func(map[string]string) bool {
	return func(l map[string]string) bool {
		c, _ := strconv.Atoi(l["code"])
		return ok(c)
	}
}

func both(a, b func(map[string]string) bool) func(map[string]string) bool {
	return func(l map[string]string) bool { return a(l) && b(l) }
}

// xrootdStats writes xrd.report's xrootd section: its operations, errors,
// redirections and logins, root:// and HTTP together (as XrdHttp's count
// in XRootD's).
func xrootdStats(w *xrdmon.XMLWriter, g gathered) {
	v := func(x float64) int64 { return int64(x) }
	xreq := func(reqs ...string) float64 { return g.sum("wanda_xrootd_requests_total", is("request", reqs...)) }
	xok := func(reqs ...string) float64 {
		return g.sum("wanda_xrootd_requests_total", both(is("request", reqs...), is("result", "ok")))
	}
	hok := func(methods ...string) float64 {
		return g.sum("wanda_http_requests_total", both(is("method", methods...), httpCode(func(c int) bool { return c >= 200 && c < 300 })))
	}

	logins := xreq("kXR_login")
	authOK, authAll := xok("kXR_auth"), xreq("kXR_auth")
	known := []string{"kXR_open", "kXR_read", "kXR_pgread", "kXR_readv", "kXR_write", "kXR_pgwrite", "kXR_writev", "kXR_sync"}
	w.Stats("xrootd")
	w.Int("num", v(g.sum("wanda_xrootd_connections_total", nil)))
	w.Start("ops")
	w.Int("open", v(xreq("kXR_open")+hok("GET", "PUT")))
	w.Int("rf", 0)
	w.Int("rd", v(xreq("kXR_read", "kXR_pgread")+hok("GET")))
	w.Int("pr", 0)
	w.Int("rv", v(xreq("kXR_readv")))
	w.Int("rs", 0)
	w.Int("wv", v(xreq("kXR_writev")))
	w.Int("ws", 0)
	w.Int("wr", v(xreq("kXR_write", "kXR_pgwrite")+hok("PUT")))
	w.Int("sync", v(xreq("kXR_sync")))
	zeros(w, "getf", "putf")
	w.Int("misc", v(g.sum("wanda_xrootd_requests_total", not(is("request", append(known, "kXR_login", "kXR_auth", "kXR_protocol")...)))+
		g.sum("wanda_http_requests_total", not(is("method", "GET", "PUT")))))
	w.End("ops")
	w.Start("sig")
	zeros(w, "ok", "bad", "ign")
	w.End("sig")
	w.Start("aio")
	zeros(w, "num", "max", "rej")
	w.End("aio")
	w.Int("err", v(g.sum("wanda_xrootd_requests_total", not(is("result", "ok")))+
		g.sum("wanda_http_requests_total", httpCode(func(c int) bool { return c >= 400 }))))
	w.Int("rdr", v(g.sum("wanda_http_requests_total", httpCode(func(c int) bool { return c >= 300 && c < 400 }))+
		g.sum("wanda_xrootd_redirects_total", nil)))
	w.Int("dly", 0)
	w.Start("lgn")
	w.Int("num", v(logins))
	w.Int("af", v(authAll-authOK))
	w.Int("au", v(authOK))
	w.Int("ua", v(max(logins-authOK, 0)))
	w.End("lgn")
	w.End("stats")
}

// fsStats writes the ofs and oss sections: the role, open files,
// third-party copies, and each export's space.
func (r *Reporter) fsStats(w *xrdmon.XMLWriter, g gathered) {
	v := func(x float64) int64 { return int64(x) }
	role := "server"
	if r.o.Role == "redirector" {
		role = "manager"
	}
	openFiles := v(g.sum("wanda_xrootd_open_files", nil))
	w.Stats("ofs")
	w.Leaf("role", role)
	zeros(w, "opr", "opw", "opp", "ups")
	w.Int("han", openFiles)
	zeros(w, "rdr", "bxq", "rep", "err", "dly", "sok", "ser")
	w.Start("tpc")
	w.Int("grnt", v(g.sum("wanda_tpc_copies_total", nil)))
	w.Int("deny", 0)
	w.Int("err", v(g.sum("wanda_tpc_copies_total", not(is("result", "ok", "success")))))
	w.Int("exp", 0)
	w.End("tpc")
	w.End("stats")

	w.Stats("oss", "v", "2")
	w.Start("paths")
	w.Text(strconv.Itoa(len(r.o.Paths)))
	for i, p := range r.o.Paths {
		var st syscall.Statfs_t
		_ = syscall.Statfs(p.Local, &st)
		bs := uint64(st.Bsize)
		w.Stats(strconv.Itoa(i))
		w.Leaf("lp", `"`+p.Logical+`"`)
		w.Leaf("rp", `"`+strings.TrimSuffix(p.Local, "/")+`/"`)
		w.Int("tot", int64(st.Blocks*bs/1024))
		w.Int("free", int64(st.Bavail*bs/1024))
		w.Int("ino", int64(st.Files))
		w.Int("ifr", int64(st.Ffree))
		w.End("stats")
	}
	w.End("paths")
	w.Int("space", 0)
	w.End("stats")
}

// Report builds one summary document. Every section and value XRootD
// 5.5 reports is there, so that its consumers find their keys; what
// wanda does not count (request signing, asynchronous I/O, poll events,
// partial sends, its scheduler's queue) is 0. docs/operations.md lists
// the mapping.
func (r *Reporter) Report(now time.Time) []byte {
	t0 := time.Now()
	g := gathered{}
	if r.o.Gatherer != nil {
		fams, _ := r.o.Gatherer.Gather()
		for _, f := range fams {
			g[f.GetName()] = f
		}
	}
	v := func(x float64) int64 { return int64(x) }
	conns := g.sum("wanda_http_open_connections", nil) + g.sum("wanda_xrootd_open_connections", nil)
	inflight := g.sum("wanda_http_requests_in_flight", nil) + g.sum("wanda_xrootd_requests_in_flight", nil)
	r.mu.Lock()
	r.maxConn, r.maxIn = max(r.maxConn, conns), max(r.maxIn, inflight)
	maxConn, maxIn := r.maxConn, r.maxIn
	r.mu.Unlock()
	var w xrdmon.XMLWriter
	w.Head(xrdmon.SummaryHead{Tod: now.Unix(), Version: r.o.Version, Host: r.o.Host, Port: r.o.Port, Tos: r.o.Start.Unix(),
		Program: r.o.Program, Name: r.o.Instance, PID: os.Getpid(), Site: r.o.Site})

	w.Stats("info")
	w.Leaf("host", r.o.Host)
	w.Int("port", int64(r.o.Port))
	w.Leaf("name", r.o.Instance)
	w.End("stats")

	w.Stats("buff")
	w.Int("reqs", v(g.sum("wanda_buffer_waits_total", nil)))
	w.Int("mem", v(g.sum("wanda_buffer_bytes", is("state", "allocated"))))
	zeros(&w, "buffs", "adj", "xlreqs", "xlmem", "xlbuffs")
	w.End("stats")

	w.Stats("link")
	w.Int("num", v(conns))
	w.Int("maxn", v(maxConn))
	w.Int("tot", v(g.sum("wanda_http_connections_total", nil)+g.sum("wanda_xrootd_connections_total", nil)))
	w.Int("in", v(g.sum("wanda_http_received_bytes_total", nil)+g.sum("wanda_xrootd_received_bytes_total", nil)))
	w.Int("out", v(g.sum("wanda_http_sent_bytes_total", nil)+g.sum("wanda_xrootd_sent_bytes_total", nil)))
	zeros(&w, "ctime", "tmo", "stall", "sfps")
	w.End("stats")

	w.Stats("poll")
	w.Int("att", v(conns))
	zeros(&w, "en", "ev", "int")
	w.End("stats")

	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	w.Stats("proc")
	w.Start("usr")
	w.Int("s", int64(ru.Utime.Sec))
	w.Int("u", int64(ru.Utime.Usec))
	w.End("usr")
	w.Start("sys")
	w.Int("s", int64(ru.Stime.Sec))
	w.Int("u", int64(ru.Stime.Usec))
	w.End("sys")
	w.End("stats")

	xrootdStats(&w, g)

	r.fsStats(&w, g)

	w.Stats("sched")
	w.Int("jobs", v(g.sum("wanda_http_requests_total", nil)+g.sum("wanda_xrootd_requests_total", nil)))
	w.Int("inq", v(inflight))
	w.Int("maxinq", v(maxIn))
	w.Int("threads", int64(runtime.NumGoroutine()))
	zeros(&w, "idle", "tcr", "tde", "tlimr")
	w.End("stats")

	w.Stats("sgen")
	w.Int("as", 0)
	w.Int("et", time.Since(t0).Microseconds())
	w.Int("toe", time.Now().Unix())
	w.End("stats")
	w.End("statistics")
	return w.B
}

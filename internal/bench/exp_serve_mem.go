package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// serveLoadFn runs one memory load against a server (its HTTP base URL
// and root:// base, both for the file names of serveEnv).
type serveLoadFn func(ctx context.Context, httpURL, rootURL func(name string) string) error

// serveMemory starts each server afresh for every load and keeps the peak
// of its RSS while the load runs.
func serveMemory(ctx context.Context, r *Run, e *serveEnv, s *serveSummary) error {
	if e.xrd == nil {
		r.Note("memory: without XRootD there is no reference, skipped")
		return nil
	}
	d, conns, conc := r.Duration("duration"), r.Int("conns"), r.Int("concurrent")
	rangeHdr := serveRangeHeader(r.Int("ranges"), min(e.size, 64<<20))
	xrdcpLoad := func(env string, streams, n int, name string) serveLoadFn {
		return func(ctx context.Context, _, root func(string) string) error {
			errs := make(chan error, n)
			for range n {
				go func() { errs <- xrdcp(ctx, env, streams, root(name), "/dev/null") }()
			}
			var first error
			for range n {
				if err := <-errs; err != nil && first == nil {
					first = err
				}
			}
			return first
		}
	}
	wrkLoad := func(name, hdr string, c int) serveLoadFn {
		return func(ctx context.Context, h, _ func(string) string) error {
			_, err := serveWrk(ctx, h(name), hdr, c, d)
			return err
		}
	}
	type load struct {
		line string
		run  serveLoadFn
		need string // a tool
	}
	loads := []load{
		{"peak RSS: one xrdcp (pgread)", xrdcpLoad("", 1, 1, e.big), "xrdcp"},
		{"peak RSS: one xrdcp (kXR_read)", xrdcpLoad("XRD_CPUSEPGWRTRD=0", 1, 1, e.big), "xrdcp"},
		{"peak RSS: xrdcp --streams 4 (pgread)", xrdcpLoad("", 4, 1, e.big), "xrdcp"},
		{fmt.Sprintf("peak RSS: %d concurrent xrdcp of %s (pgread)", conc, client.FormatBytes(min(e.size, 64<<20))), xrdcpLoad("", 1, conc, e.mid), "xrdcp"},
		{fmt.Sprintf("peak RSS: 8 wrk connections of %d-range requests", r.Int("ranges")), wrkLoad(e.mid, rangeHdr, 8), "wrk"},
		{fmt.Sprintf("peak RSS: %d wrk connections of 1 MiB GETs", conns), wrkLoad(e.mib, "", conns), "wrk"},
	}
	r.Note("memory: for every load each server is a fresh process (wanda server; xrootd with XrdHttp), its VmRSS and RssAnon read from /proc every 10 ms while the load runs; the peak of VmRSS is the figure (RssAnon, its private part, in the rows: wanda's VmRSS includes ~20 MiB of its own 30+ MB binary's pages, XRootD's its shared libraries')")
	for rep := 1; rep <= r.Reps(); rep++ {
		for _, l := range loads {
			if !r.Have(l.need) {
				continue
			}
			vals, anons := map[string]float64{}, map[string]float64{}
			for _, srv := range turn([]string{srvWanda, srvXRootD}, rep) {
				e.next(r, fmt.Sprintf("%s, %s rep=%d", l.line, srv, rep))
				peak, anon, err := serveMeasureLoad(ctx, r, e, srv, l.run)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", l.line, srv, err)
				}
				vals[srv], anons[srv] = float64(peak)/1024, float64(anon)/1024
				r.Row("part", "memory", "line", l.line, "server", srv, "value", netRound(vals[srv], 1), "unit", "MiB",
					"anon_mib", netRound(anons[srv], 1), "rep", rep)
			}
			s.addAtMost(l.line, "MiB", vals, srvXRootD, 1.25)
			s.addAtMost(l.line+", private part (RssAnon)", "MiB", anons, srvXRootD, 1.25)
		}
	}
	return nil
}

// serveFresh starts a new process of server srv and returns its pid, its
// URL makers and its stop.
func serveFresh(ctx context.Context, r *Run, e *serveEnv, srv string) (pid int, h, root func(string) string, stop func(), err error) {
	if srv == srvWanda {
		p, err := serveStartWanda(ctx, r, e)
		if err != nil {
			return 0, nil, nil, nil, err
		}
		f := &serveEnv{wanda: p}
		return p.cmd.Process.Pid, func(n string) string { return f.httpURL(srvWanda, n) },
			func(n string) string { return f.rootURL(srvWanda, n) }, p.stop, nil
	}
	x, err := serveStartXRootD(ctx, r, e)
	if err != nil || x == nil {
		return 0, nil, nil, nil, fmt.Errorf("xrootd: %w", err)
	}
	f := &serveEnv{xrd: x}
	return x.Pid(), func(n string) string { return f.httpURL(srvXRootD, n) },
		func(n string) string { return f.rootURL(srvXRootD, n) }, func() { x.Close() }, nil
}

// serveMeasureLoad runs load against a fresh server and returns the peaks
// of its VmRSS and RssAnon in KiB.
func serveMeasureLoad(ctx context.Context, r *Run, e *serveEnv, srv string, load serveLoadFn) (peak, anon int64, err error) {
	pid, h, root, stop, err := serveFresh(ctx, r, e, srv)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, a, err := serveRSS(pid); err == nil {
				peak, anon = max(peak, rss), max(anon, a)
			}
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	err = load(ctx, h, root)
	cancel()
	wg.Wait()
	if rss, a, rerr := serveRSS(pid); rerr == nil {
		peak, anon = max(peak, rss), max(anon, a)
	}
	return peak, anon, err
}

// serveRSS reads a process's VmRSS and RssAnon (KiB).
func serveRSS(pid int) (rss, anon int64, err error) {
	kb, err := procStatusKiB(pid, "VmRSS", "RssAnon")
	return kb[0], kb[1], err
}

// serveIdle opens idle connections to a fresh server and reports the RSS
// they add per connection.
func serveIdle(ctx context.Context, r *Run, e *serveEnv, s *serveSummary) error {
	n := r.Int("idle")
	servers := []string{srvWanda}
	if e.xrd != nil {
		servers = append(servers, srvXRootD)
	}
	r.Note("idle: %d connections opened one after the other from the bench process to a fresh server (HTTP: after one HEAD of the 1 MiB file, keep-alive; root://: after the handshake and kXR_login), then left idle for a second; the figure is the growth of the server's VmRSS divided by the connections", n)
	for _, proto := range []string{"http", "root"} {
		line := fmt.Sprintf("RSS per idle %s connection (%d connections)", map[string]string{"http": "HTTP", "root": "root://"}[proto], n)
		vals := map[string]float64{}
		for _, srv := range servers {
			e.next(r, fmt.Sprintf("%s, %s", line, srv))
			kib, err := serveIdleOnce(ctx, r, e, srv, proto, n)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", line, srv, err)
			}
			vals[srv] = kib
			r.Row("part", "idle", "line", line, "server", srv, "value", netRound(kib, 2), "unit", "KiB", "rep", 1)
		}
		s.addAtMost(line, "KiB", vals, srvXRootD, 0)
		s.absolute(line, "KiB", 20)
	}
	return nil
}

func serveIdleOnce(ctx context.Context, r *Run, e *serveEnv, srv, proto string, n int) (float64, error) {
	pid, h, root, stop, err := serveFresh(ctx, r, e, srv)
	if err != nil {
		return 0, err
	}
	defer stop()
	before, _, err := serveRSS(pid)
	if err != nil {
		return 0, err
	}
	var addr, path string
	if proto == "http" {
		u := h(e.mib)
		rest := strings.TrimPrefix(u, "http://")
		addr, path, _ = strings.Cut(rest, "/")
		path = "/" + path
	} else {
		addr, _, _ = strings.Cut(strings.TrimPrefix(root(e.mib), "root://"), "/")
	}
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		if err := context.Cause(ctx); err != nil {
			return 0, err
		}
		c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return 0, fmt.Errorf("connection %d: %w", i+1, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if proto == "http" {
			err = serveIdleHTTP(c, addr, path)
		} else {
			err = serveIdleRoot(c, i)
		}
		if err != nil {
			return 0, fmt.Errorf("connection %d: %w", i+1, err)
		}
	}
	if err := sleepCtx(ctx, time.Second); err != nil {
		return 0, err
	}
	after, _, err := serveRSS(pid)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

func serveIdleHTTP(c net.Conn, host, path string) error {
	if _, err := fmt.Fprintf(c, "HEAD %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodHead})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HEAD %s: %s", path, resp.Status)
	}
	return nil
}

func serveIdleRoot(c net.Conn, i int) error {
	req := xrootd.AppendHandshake(nil)
	req = xrootd.AppendRequest(req, xrootd.StreamID{0, 1}, xrootd.ReqLogin, xrootd.LoginRequest{PID: int32(i + 1), CapVer: 5}.Body(), nil)
	if _, err := c.Write(req); err != nil {
		return err
	}
	// The handshake's answer (8 + 8 bytes), then login's header and body.
	var hdr [16 + 8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	if st := int(hdr[18])<<8 | int(hdr[19]); st != 0 {
		return fmt.Errorf("kXR_login answered status %d", st)
	}
	dlen := int64(hdr[20])<<24 | int64(hdr[21])<<16 | int64(hdr[22])<<8 | int64(hdr[23])
	_, err := io.CopyN(io.Discard, c, dlen)
	return err
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

package app_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/monitor/srr/srrtest"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmontest"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// monitorTo sends a role's detailed streams (and summary) to col, with
// short intervals.
func monitorTo(c *config.Config, col, sum *xrdmontest.Collector) {
	m := &c.Monitoring.XRootD
	m.Destinations, m.FStat, m.Flush = []string{col.Addr()}, config.Interval(time.Second), config.Interval(time.Second)
	if sum != nil {
		m.Report, m.ReportInterval = []string{sum.Addr()}, config.Interval(time.Second)
	}
}

// getSRR fetches and checks a role's SRR document.
func getSRR(t *testing.T, u string) map[string]any {
	t.Helper()
	var body []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, b := doReq(t, http.MethodGet, u, nil)
		if resp.StatusCode == 200 {
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%s: Content-Type %q", u, ct)
			}
			body = b
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	srrtest.Validate(t, body)
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	return doc["storageservice"].(map[string]any)
}

// The server: --monitor-udp's streams of an HTTP GET and a root:// read,
// the summary, and SRR at /.well-known/srr and at the configured path,
// its numbers df's.
func TestMonitoringServer(t *testing.T) {
	col, sum := xrdmontest.Listen(t), xrdmontest.Listen(t)
	cfg, dir := newConfig(t)
	monitorTo(&cfg, col, sum)
	cfg.Monitoring.SRR.Path = "/srr"
	cfg.Monitoring.SRR.VOs = []string{"cms"}
	cfg.Monitoring.SRR.Shares = []config.SRRShare{{Name: "user", Path: "/data/user", Quota: 1 << 30}}
	if err := os.MkdirAll(filepath.Join(dir, "user"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "user", "m.bin"), bytes.Repeat([]byte("m"), 70000), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	base := "http://" + addr
	if resp, b := doReq(t, http.MethodGet, base+"/data/user/m.bin", nil); resp.StatusCode != 200 || len(b) != 70000 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	xc := xrdclient.New(xrdclient.Options{})
	u, _ := url.Parse("root://" + addr + "//data/user/m.bin")
	rc, _, err := xc.Read(t.Context(), u, 1000, 5000, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	xc.CloseIdle()
	var v *xrdmontest.View
	xrdmontest.Wait(t, 10*time.Second, "two closed transfers", func() bool {
		v = col.View()
		n := 0
		for _, tr := range v.Transfers {
			if tr.Closed && tr.Path == "/data/user/m.bin" {
				n++
			}
		}
		return n == 2
	})
	protos := map[string]int64{}
	for _, tr := range v.Transfers {
		if tr.User == nil {
			t.Fatalf("a transfer without its user: %+v", tr)
		}
		protos[tr.User.Ident.Protocol] += tr.Xfr.Read
	}
	if protos["http"] != 70000 || protos["xroot"] != 5000 {
		t.Errorf("bytes by protocol: %v", protos)
	}
	if v.Server == nil || !strings.Contains(v.Server.Info, "&port="+strings.Split(addr, ":")[1]) {
		t.Errorf("server ident: %+v", v.Server)
	}
	xrdmontest.Wait(t, 10*time.Second, "a summary", func() bool { return len(sum.Summaries()) > 0 })

	for _, p := range []string{"/.well-known/srr", "/srr"} {
		ss := getSRR(t, base+p)
		eps := ss["storageendpoints"].([]any)
		if ss["implementation"] != "wanda" || len(eps) != 2 || eps[0].(map[string]any)["endpointurl"] != base ||
			eps[1].(map[string]any)["endpointurl"] != "root://"+addr {
			t.Errorf("%s: %v", p, ss)
		}
		shares := ss["storageshares"].([]any)
		if len(shares) != 2 {
			t.Fatalf("%s: shares %v", p, shares)
		}
		data, user := shares[0].(map[string]any), shares[1].(map[string]any)
		out, err := exec.Command("df", "-B1", "--output=size", dir).Output()
		if err != nil {
			t.Skipf("df: %v", err)
		}
		f := strings.Fields(string(out))
		size, _ := strconv.ParseFloat(f[len(f)-1], 64)
		if data["name"] != "data" || data["totalsize"] != size || data["vos"].([]any)[0] != "cms" {
			t.Errorf("%s: the export's share %v (df: %v bytes)", p, data, size)
		}
		if user["totalsize"] != float64(1<<30) || user["usedsize"].(float64) < 70000 || user["path"].([]any)[0] != "/data/user" {
			t.Errorf("%s: the quota share %v", p, user)
		}
	}
}

// A redirector's streams: the redirections of an HTTP GET and a root://
// open, with the users that asked; its SRR names no share.
func TestMonitoringRedirector(t *testing.T) {
	cfg, dir := newConfig(t)
	if err := os.WriteFile(filepath.Join(dir, "r.bin"), []byte("redirected"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	col := xrdmontest.Listen(t)
	rcfg := config.Default()
	monitorTo(&rcfg, col, nil)
	rcfg.Redirector.Members = []config.StaticMember{{URL: "http://" + addr, Exports: []config.Export{{Prefix: "/data"}}}}
	rd, err := app.NewRedirector(rcfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rbase := serveRole(t, rd.Serve)
	if resp, _ := doReq(t, http.MethodGet, rbase+"/data/r.bin", nil); resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	xc := xrdclient.New(xrdclient.Options{})
	u, _ := url.Parse("root://" + strings.TrimPrefix(rbase, "http://") + "//data/r.bin")
	var re *client.RedirectError
	if _, _, err := xc.Read(t.Context(), u, 0, 10, nil); !errors.As(err, &re) {
		t.Fatalf("root:// through the redirector: %v", err)
	}
	xc.CloseIdle()
	var v *xrdmontest.View
	xrdmontest.Wait(t, 10*time.Second, "two redirections", func() bool { v = col.View(); return len(v.Redirects) >= 2 })
	host, port, _ := strings.Cut(addr, ":")
	for _, r := range v.Redirects {
		if r.Host != host || strconv.Itoa(int(r.Port)) != port || r.Path != "/data/r.bin" || r.Op != xrdmon.OpOpenR {
			t.Errorf("redirection %+v: want %s /data/r.bin", r, addr)
		}
		if u := v.Users[r.UserID]; u == nil {
			t.Errorf("redirection %+v: its user %d was not reported", r, r.UserID)
		}
	}
	ss := getSRR(t, rbase+"/.well-known/srr")
	if len(ss["storageshares"].([]any)) != 0 {
		t.Errorf("a redirector's shares: %v", ss["storageshares"])
	}
}

// A cache's g-stream: XCache's file_close records, a miss then a hit.
func TestMonitoringCache(t *testing.T) {
	cfg, dir := newConfig(t)
	data := bytes.Repeat([]byte("g"), 300<<10)
	if err := os.WriteFile(filepath.Join(dir, "g.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	col := xrdmontest.Listen(t)
	ccfg := config.Default()
	monitorTo(&ccfg, col, nil)
	ccfg.Cache.Upstream = "http://" + addr
	ccfg.Cache.Dir = t.TempDir()
	ccfg.Cache.BlockSize = 64 << 10
	ccfg.Monitoring.SRR.Interval = time.Second
	cbase := serveCache(t, ccfg)
	for range 2 {
		if resp, b := doReq(t, http.MethodGet, cbase+"/data/g.bin", nil); resp.StatusCode != 200 || len(b) != len(data) {
			t.Fatalf("cache GET: %d", resp.StatusCode)
		}
	}
	var lines []string
	xrdmontest.Wait(t, 10*time.Second, "two cache records", func() bool { lines = col.View().GLines; return len(lines) >= 2 })
	var miss, hit map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &miss)
	_ = json.Unmarshal([]byte(lines[1]), &hit)
	blocks := float64((len(data) + 64<<10 - 1) / (64 << 10))
	if miss["event"] != "file_close" || miss["lfn"] != "/data/g.bin" || miss["b_miss"] != float64(len(data)) || miss["b_hit"] != float64(0) ||
		miss["blk_size"] != float64(64<<10) || miss["n_blks"] != blocks || miss["n_blks_done"] != blocks || miss["size"] != float64(len(data)) {
		t.Errorf("the miss: %v", miss)
	}
	if hit["b_hit"] != float64(len(data)) || hit["b_miss"] != float64(0) {
		t.Errorf("the hit: %v", hit)
	}
	if r := miss["remotes"].([]any); len(r) != 1 || r[0] != addr {
		t.Errorf("remotes: %v", miss["remotes"])
	}
	// The cache's share: its size and what its blocks hold, by its own
	// accounting (refreshed every second here).
	var sh map[string]any
	xrdmontest.Wait(t, 10*time.Second, "the cache's share to count the file", func() bool {
		shares := getSRR(t, cbase+"/.well-known/srr")["storageshares"].([]any)
		if len(shares) != 1 {
			t.Fatalf("a cache's shares: %v", shares)
		}
		sh = shares[0].(map[string]any)
		return sh["usedsize"] == float64(len(data))
	})
	if sh["name"] != "cache" || sh["totalsize"] != float64(ccfg.Cache.MaxSize) || sh["numberoffiles"] != float64(1) {
		t.Errorf("the cache's share: %v", sh)
	}
}

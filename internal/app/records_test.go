package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// records reads the JSON lines of a records file (none yet: empty).
func records(t *testing.T, path string) []monitor.Record {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []monitor.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r monitor.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("records line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// waitRecord polls path until a record matches (10 s at most).
func waitRecord(t *testing.T, path, what string, match func(monitor.Record) bool) monitor.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, r := range records(t, path) {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s in %s; have %+v", what, path, records(t, path))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func doReq(t *testing.T, method, u string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func TestRecordsHTTP(t *testing.T) {
	cfg, dir := newConfig(t)
	rf := filepath.Join(t.TempDir(), "records.jsonl")
	cfg.Records.File = rf
	cfg.Server.Federation.Labels = map[string]string{"site": "T2_Test"}
	data := bytes.Repeat([]byte("0123456789"), 10000)
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	base := "http://" + addr

	// GET, with a token in the query that must not reach the records.
	resp, got := doReq(t, http.MethodGet, base+"/data/f.bin?authz=Bearer%20sekrit", nil)
	if resp.StatusCode != 200 || len(got) != len(data) {
		t.Fatalf("GET: %d, %d bytes", resp.StatusCode, len(got))
	}
	r := waitRecord(t, rf, "the GET", func(r monitor.Record) bool { return r.Op == "GET" && r.Path == "/data/f.bin" })
	if r.Protocol != "http" || r.User != "anonymous" || r.BytesRead != int64(len(data)) || r.BytesWritten != 0 ||
		r.Result != "ok" || r.Status != 200 || r.Size != int64(len(data)) || r.Role != "server" || r.Site != "T2_Test" ||
		r.Server != base || r.Reads != 1 || !strings.HasPrefix(r.Client, "127.0.0.1:") || r.Type != "access" {
		t.Errorf("GET record: %+v", r)
	}

	// PUT.
	up := bytes.Repeat([]byte("u"), 12345)
	if resp, _ := doReq(t, http.MethodPut, base+"/data/up.bin", bytes.NewReader(up)); resp.StatusCode/100 != 2 {
		t.Fatalf("PUT: %d", resp.StatusCode)
	}
	r = waitRecord(t, rf, "the PUT", func(r monitor.Record) bool { return r.Op == "PUT" })
	if r.BytesWritten != int64(len(up)) || r.BytesRead != 0 || r.Result != "ok" || r.Path != "/data/up.bin" || r.Writes != 1 {
		t.Errorf("PUT record: %+v", r)
	}

	// A failed open: 404.
	if resp, _ := doReq(t, http.MethodGet, base+"/data/missing.bin", nil); resp.StatusCode != 404 {
		t.Fatalf("GET missing: %d", resp.StatusCode)
	}
	r = waitRecord(t, rf, "the 404", func(r monitor.Record) bool { return r.Path == "/data/missing.bin" })
	if r.Result != "error" || r.ErrorClass != "not_found" || r.Status != 404 || r.BytesRead != 0 {
		t.Errorf("404 record: %+v", r)
	}

	// A multi-range GET is a vector read.
	if resp, _ := doReq(t, http.MethodGet, base+"/data/f.bin", nil, "Range", "bytes=0-9,100-199,5000-5099"); resp.StatusCode != 206 {
		t.Fatalf("multi-range GET: %d", resp.StatusCode)
	}
	r = waitRecord(t, rf, "the multi-range GET", func(r monitor.Record) bool { return r.Readvs == 1 })
	if r.ReadvSegs != 3 || r.ReadvBytes != 210 || r.BytesRead != 210 || r.Reads != 0 {
		t.Errorf("multi-range record: %+v", r)
	}

	// /metrics and /healthz are not file accesses; the counters are there.
	_, m := doReq(t, http.MethodGet, base+"/metrics", nil)
	if !bytes.Contains(m, []byte(`wanda_records_written_total{role="server",sink="file"}`)) ||
		!bytes.Contains(m, []byte(`wanda_records_dropped_total{reason="queue_full",role="server"} 0`)) {
		t.Errorf("/metrics lacks the records' counters")
	}
	for _, rec := range records(t, rf) {
		if rec.Path == "/metrics" || rec.Path == "/healthz" {
			t.Errorf("a record of %s", rec.Path)
		}
	}
	b, _ := os.ReadFile(rf)
	if bytes.Contains(b, []byte("sekrit")) {
		t.Error("a query token reached the records")
	}
}

func TestRecordsRoot(t *testing.T) {
	cfg, dir := newConfig(t)
	rf := filepath.Join(t.TempDir(), "records.jsonl")
	cfg.Records.File = rf
	data := bytes.Repeat([]byte("abcdefgh"), 1<<14) // 128 KiB
	if err := os.WriteFile(filepath.Join(dir, "r.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	xc := xrdclient.New(xrdclient.Options{})
	u, _ := url.Parse("root://" + addr + "//data/r.bin")

	// A read, then a vector read of three segments.
	rc, _, err := xc.Read(t.Context(), u, 0, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rc); !bytes.Equal(b, data[:1000]) {
		t.Fatal("root:// read differs")
	}
	rc.Close()
	want := []client.Range{{Off: 0, Len: 10}, {Off: 4096, Len: 100}, {Off: 65536, Len: 1000}}
	dst := [][]byte{make([]byte, 10), make([]byte, 100), make([]byte, 1000)}
	if err := xc.ReadV(t.Context(), u, want, dst); err != nil {
		t.Fatal(err)
	}
	xc.CloseIdle() // the handles close: their records are written
	r := waitRecord(t, rf, "the vector read", func(r monitor.Record) bool { return r.Protocol == "root" && r.Readvs > 0 })
	if r.Path != "/data/r.bin" || r.ReadvSegs != 3 || r.ReadvBytes != 1110 || r.Result != "ok" || r.Size != int64(len(data)) ||
		r.User != "anonymous" || r.Op != "read" {
		t.Errorf("readv record: %+v", r)
	}
	waitRecord(t, rf, "the read", func(r monitor.Record) bool {
		return r.Protocol == "root" && r.Reads > 0 && r.ReadBytes >= 1000 && r.BytesRead == r.ReadBytes+r.ReadvBytes
	})

	// A failed open.
	miss, _ := url.Parse("root://" + addr + "//data/nope.bin?authz=sekrit")
	if _, _, err := xc.Read(t.Context(), miss, 0, 10, nil); err == nil {
		t.Fatal("read of a missing file succeeded")
	}
	r = waitRecord(t, rf, "the failed open", func(r monitor.Record) bool { return r.Path == "/data/nope.bin" })
	if r.Result != "error" || r.ErrorClass != "not_found" || r.Status != 3011 {
		t.Errorf("failed open record: %+v", r)
	}
	// An upload over root:// counts its bytes written.
	src := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(src, data[:5000], 0o644); err != nil {
		t.Fatal(err)
	}
	c := client.New()
	xrdclient.Register(c)
	if _, err := c.Copy(t.Context(), []string{src}, "root://"+addr+"//data/w.bin", client.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	r = waitRecord(t, rf, "the root:// upload", func(r monitor.Record) bool { return r.Path == "/data/w.bin" && r.Op == "write" })
	if r.BytesWritten != 5000 || r.Result != "ok" || r.Writes == 0 {
		t.Errorf("upload record: %+v", r)
	}
	if b, _ := os.ReadFile(rf); bytes.Contains(b, []byte("sekrit")) {
		t.Error("a CGI token reached the records")
	}
}

// serveRole runs a role's Serve on a loopback listener until the test ends.
// serveCache builds a cache from cfg and serves it until the test ends.
func serveCache(t *testing.T, cfg config.Config) string {
	t.Helper()
	cc, err := app.NewCache(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return serveRole(t, cc.Serve)
}

func serveRole(t *testing.T, serve func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("role did not stop")
		}
	})
	base := "http://" + ln.Addr().String()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy", base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRecordsRedirectorAndCache(t *testing.T) {
	cfg, dir := newConfig(t)
	data := bytes.Repeat([]byte("c"), 300<<10)
	if err := os.WriteFile(filepath.Join(dir, "c.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	origin := "http://" + addr

	// A redirector with the server as its static member.
	rcfg := config.Default()
	rrf := filepath.Join(t.TempDir(), "redirector.jsonl")
	rcfg.Records.File = rrf
	rcfg.Redirector.Members = []config.StaticMember{{URL: origin, Exports: []config.Export{{Prefix: "/data"}}}}
	rd, err := app.NewRedirector(rcfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rbase := serveRole(t, rd.Serve)
	resp, _ := doReq(t, http.MethodGet, rbase+"/data/c.bin?authz=sekrit", nil)
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("redirector GET: %d", resp.StatusCode)
	}
	r := waitRecord(t, rrf, "the redirect", func(r monitor.Record) bool { return r.Path == "/data/c.bin" })
	if r.Role != "redirector" || r.Result != "redirect" || r.Status != 307 || r.Redirect != origin+"/data/c.bin" || r.Server != rbase {
		t.Errorf("redirector record: %+v", r)
	}
	if resp, _ := doReq(t, http.MethodGet, rbase+"/data/none.bin", nil); resp.StatusCode != 404 {
		t.Fatalf("redirector GET of a missing file: %d", resp.StatusCode)
	}
	waitRecord(t, rrf, "the redirector's 404", func(r monitor.Record) bool { return r.Path == "/data/none.bin" && r.ErrorClass == "not_found" })
	for _, rec := range records(t, rrf) {
		if strings.HasPrefix(rec.Path, "/api/") {
			t.Errorf("a record of the federation API: %+v", rec)
		}
	}
	if b, _ := os.ReadFile(rrf); bytes.Contains(b, []byte("sekrit")) {
		t.Error("a query token reached the redirector's records")
	}

	// A cache of the server: a miss, then a hit.
	ccfg := config.Default()
	crf := filepath.Join(t.TempDir(), "cache.jsonl")
	ccfg.Records.File = crf
	ccfg.Cache.Upstream = origin
	ccfg.Cache.Dir = t.TempDir()
	cbase := serveCache(t, ccfg)
	for range 2 {
		if resp, b := doReq(t, http.MethodGet, cbase+"/data/c.bin", nil); resp.StatusCode != 200 || len(b) != len(data) {
			t.Fatalf("cache GET: %d, %d bytes", resp.StatusCode, len(b))
		}
	}
	waitRecord(t, crf, "the cache's two reads", func(r monitor.Record) bool { return len(records(t, crf)) >= 2 })
	recs := records(t, crf)
	miss, hit := recs[0], recs[1]
	if miss.Role != "cache" || miss.CacheMissBytes != int64(len(data)) || miss.CacheHitBytes != 0 || miss.BytesRead != int64(len(data)) {
		t.Errorf("cache miss record: %+v", miss)
	}
	if hit.CacheHitBytes != int64(len(data)) || hit.CacheMissBytes != 0 {
		t.Errorf("cache hit record: %+v", hit)
	}
	// root:// through the cache: the handle's record has its hits.
	xc := xrdclient.New(xrdclient.Options{})
	u, _ := url.Parse("root://" + strings.TrimPrefix(cbase, "http://") + "//data/c.bin")
	rc, _, err := xc.Read(t.Context(), u, 0, 1<<16, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rc); len(b) != 1<<16 {
		t.Fatalf("root:// read through the cache: %d bytes", len(b))
	}
	rc.Close()
	xc.CloseIdle()
	r = waitRecord(t, crf, "the cache's root:// read", func(r monitor.Record) bool { return r.Protocol == "root" })
	if r.CacheHitBytes < 1<<16 || r.CacheMissBytes != 0 || r.BytesRead != 1<<16 || r.Role != "cache" {
		t.Errorf("cache root:// record: %+v", r)
	}
}

// The user of a record is the verified token's subject, never the token;
// a request without one is anonymous.
func TestRecordsTokenSubject(t *testing.T) {
	is := authtest.NewIssuer(t)
	rf := filepath.Join(t.TempDir(), "records.jsonl")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		authtest.Protect(is, "/store", true)(c)
		c.Records.File = rf
	}}, config.Export{Prefix: "/store", Path: dir})
	tok := is.Token(t, "storage.read:/ storage.create:/", map[string]any{"sub": "carol"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, _ := doReq(t, http.MethodGet, srv.URL+"/store/f.txt", nil, "Authorization", "Bearer "+tok)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("issuer keys never fetched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, _ := doReq(t, http.MethodPut, srv.URL+"/store/new.txt?authz=Bearer%20"+tok, strings.NewReader("x")); resp.StatusCode/100 != 2 {
		t.Fatalf("PUT with a query token: %d", resp.StatusCode)
	}
	doReq(t, http.MethodGet, srv.URL+"/store/f.txt", nil)
	waitRecord(t, rf, "carol's read", func(r monitor.Record) bool { return r.Op == "GET" && r.User == "carol" && r.Result == "ok" })
	waitRecord(t, rf, "carol's upload", func(r monitor.Record) bool { return r.Op == "PUT" && r.User == "carol" && r.Path == "/store/new.txt" })
	waitRecord(t, rf, "the anonymous read", func(r monitor.Record) bool { return r.Op == "GET" && r.User == "anonymous" })
	b, _ := os.ReadFile(rf)
	if bytes.Contains(b, []byte(tok)) || bytes.Contains(b, []byte(tok[len(tok)-20:])) {
		t.Error("the token reached the records")
	}
}

// A long upload reports progress records with its bytes so far, then its
// record at the end (the same id).
func TestRecordsProgress(t *testing.T) {
	cfg, _ := newConfig(t)
	rf := filepath.Join(t.TempDir(), "records.jsonl")
	cfg.Records.File = rf
	cfg.Records.ProgressInterval = time.Second
	addr, _, _ := start(t, cfg)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/data/slow.bin", pr)
	req.ContentLength = 2000
	done := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	if _, err := pw.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	p := waitRecord(t, rf, "a progress record", func(r monitor.Record) bool {
		return r.Type == "progress" && r.BytesWritten == 1000 && r.Result == "active" && r.Path == "/data/slow.bin"
	})
	if _, err := pw.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if st := <-done; st/100 != 2 {
		t.Fatalf("PUT: %d", st)
	}
	end := waitRecord(t, rf, "the upload's record", func(r monitor.Record) bool { return r.Type == "access" && r.Path == "/data/slow.bin" })
	if end.ID != p.ID || end.BytesWritten != 2000 || end.Result != "ok" {
		t.Errorf("end record %+v after progress %+v", end, p)
	}
}

// A third-party copy (HTTP COPY, pulled) is a record with its bytes, its
// ends and its mode; a failed one names the class.
func TestRecordsCopy(t *testing.T) {
	srcCfg, srcDir := newConfig(t)
	data := bytes.Repeat([]byte("copy"), 50000)
	if err := os.WriteFile(filepath.Join(srcDir, "c.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	src, _, _ := start(t, srcCfg)
	cfg, _ := newConfig(t)
	rf := filepath.Join(t.TempDir(), "records.jsonl")
	cfg.Records.File = rf
	cfg.Server.TPC.Allow = []string{"127.0.0.0/8"}
	dst, _, _ := start(t, cfg)
	resp, body := doReq(t, "COPY", "http://"+dst+"/data/copied.bin", nil, "Source", "http://"+src+"/data/c.bin")
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(body), "success") {
		t.Fatalf("COPY: %d %s", resp.StatusCode, body)
	}
	r := waitRecord(t, rf, "the copy", func(r monitor.Record) bool { return r.Op == "COPY" && r.Path == "/data/copied.bin" })
	if r.BytesWritten != int64(len(data)) || r.Mode != "pull" || r.Source != "http://"+src+"/data/c.bin" || r.Result != "ok" {
		t.Errorf("copy record: %+v", r)
	}
	resp, body = doReq(t, "COPY", "http://"+dst+"/data/none.bin", nil, "Source", "http://"+src+"/data/none.bin")
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(body), "failure") {
		t.Fatalf("COPY of a missing file: %d %s", resp.StatusCode, body)
	}
	r = waitRecord(t, rf, "the failed copy", func(r monitor.Record) bool { return r.Op == "COPY" && r.Path == "/data/none.bin" })
	if r.Result != "error" || r.ErrorClass != "remote_404" {
		t.Errorf("failed copy record: %+v", r)
	}
}

// The redirector's root:// front-end records where it sent an open.
func TestRecordsRedirectorRoot(t *testing.T) {
	cfg, dir := newConfig(t)
	rf := filepath.Join(t.TempDir(), "server.jsonl")
	cfg.Records.File = rf
	if err := os.WriteFile(filepath.Join(dir, "x.bin"), []byte("root via redirector"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := start(t, cfg)
	rcfg := config.Default()
	rrf := filepath.Join(t.TempDir(), "redirector.jsonl")
	rcfg.Records.File = rrf
	rcfg.Redirector.Members = []config.StaticMember{{URL: "http://" + addr, Exports: []config.Export{{Prefix: "/data"}}}}
	rd, err := app.NewRedirector(rcfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rbase := serveRole(t, rd.Serve)
	xc := xrdclient.New(xrdclient.Options{})
	defer xc.CloseIdle()
	u, _ := url.Parse("root://" + strings.TrimPrefix(rbase, "http://") + "//data/x.bin")
	// The transport hands the redirect to its caller (client.Client follows).
	var re *client.RedirectError
	if _, _, err := xc.Read(t.Context(), u, 0, 100, nil); !errors.As(err, &re) || !strings.Contains(re.Error(), addr) {
		t.Fatalf("read through the redirector: %v, want a redirect to %s", err, addr)
	}
	r := waitRecord(t, rrf, "the root:// redirect", func(r monitor.Record) bool { return r.Protocol == "root" && r.Path == "/data/x.bin" })
	if r.Result != "redirect" || r.Role != "redirector" || r.Op != "read" || r.Redirect != addr {
		t.Errorf("redirector root:// record: %+v", r)
	}
	// Followed, the redirect carries the redirector's ID to the server:
	// the server's record names the chain.
	if !strings.Contains(re.Location.RawQuery, "wanda.rdr=") {
		t.Fatalf("the redirect carries no chain: %s", re.Location)
	}
	rc, _, err := xc.Read(t.Context(), re.Location, 0, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	xc.CloseIdle()
	if string(b) != "root via redirector" {
		t.Fatalf("read %q", b)
	}
	s := waitRecord(t, rf, "the server's root:// read", func(r monitor.Record) bool { return r.Protocol == "root" && r.Path == "/data/x.bin" })
	if len(s.Chain) != 1 || s.Chain[0] != rd.Core().ID() || s.BytesRead != int64(len(b)) {
		t.Errorf("server record %+v: want the chain [%s]", s, rd.Core().ID())
	}
}

package client_test

// Multi-range answers of real servers, parsed with ReadRangeBody and
// scattered with Scatter: wanda (in-process), nginx (a throw-away instance
// on an inherited loopback listener) and Go's net/http.ServeContent.
// What they differ in, as seen here:
//   - wanda: random hex boundary, parts in the order asked, never merged,
//     no preamble.
//   - nginx 1.22: boundary "00000000000000000001", "00000000000000000002",
//     ... (a counter), a CRLF before the first delimiter, parts in the
//     order asked, overlapping ones not merged; 200 with the whole file when
//     the ranges add up to more than the file.
//   - ServeContent: mime/multipart's random boundary, Content-Range before
//     Content-Type in parts, parts as asked, 200 with the whole file when the
//     ranges add up to more than the file.
//   - XrdHttp 5.5.3 (probed by hand with this file's brRun; not run here, it
//     needs root to start xrootd as its own user): the constant boundary
//     "123456", a CRLF before the first delimiter, "Content-type:
//     text/plain; charset=UTF-8" and "Content-range" in every part, parts as
//     asked, overlapping ones served (no 200), 1000 ranges in one request
//     fine; a single range comes without Content-Type.
//
// The file holds nginx's first boundaries: a parser that looks for the
// delimiter inside the data would cut those parts short.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

const brFileSize = 8 << 20

// brData writes a random file into a fresh directory readable by nginx's
// workers and returns the directory and the content.
func brData(t *testing.T) (dir string, file []byte) {
	t.Helper()
	dir = t.TempDir()
	file = make([]byte, brFileSize)
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range file {
		file[i] = byte(rng.Uint32())
	}
	// Plant nginx's first boundaries in the data: a parser that looks for
	// the delimiter inside parts would cut them here.
	for i, off := range []int{4096 - 10, 1 << 20, 3 << 20} {
		copy(file[off:], fmt.Sprintf("\r\n--%020d\r\n", i+1))
	}
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

// brMissing skips (locally) or fails (in CI) for an absent prerequisite.
func brMissing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("prerequisite missing in CI: %s", why)
	}
	t.Skipf("skipping: %s (install it to run this test; with CI set this is a failure)", why)
}

var brHTTP = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 4},
	Timeout:   60 * time.Second,
}

// brServeWanda runs a wanda server over dir; the file is at URL + "/data/f.bin".
func brServeWanda(t *testing.T, dir string) string {
	t.Helper()
	srv := testserver.Start(t, config.Export{Prefix: "/data", Path: dir, ReadOnly: true})
	t.Cleanup(brHTTP.CloseIdleConnections) // before the server stops
	return srv.URL + "/data/f.bin"
}

// brServeNginx runs nginx over dir on a listener it inherits (nginx adopts
// the sockets named in $NGINX, as in its binary upgrade), so no port is
// ever closed and reused.
func brServeNginx(t *testing.T, dir string) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			brMissing(t, fmt.Sprintf("nginx not found in PATH or /usr/sbin (%v)", err))
		}
		bin = "/usr/sbin/nginx"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.(*net.TCPListener).File()
	ln.Close() // lf holds the socket
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	prefix := t.TempDir()
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers would otherwise run as nobody
	}
	conf := fmt.Sprintf(`daemon off;
master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log notice;
%[2]s
events { worker_connections 64; }
http {
	access_log off;
	default_type application/octet-stream;
	sendfile on;
	# tcp_nopush on (the peers README's reference config) stalls ~40 ms on
	# each multi-range answer of ~16 x 4 KiB parts here (0.26 ms with it
	# off): the narrow plans would take seconds.
	tcp_nopush off;
	large_client_header_buffers 4 64k;
	server {
		listen %[3]s;
		root %[4]s;
		max_ranges 2000;
	}
}
`, prefix, user, ln.Addr().String(), dir)
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", confPath, "-p", prefix+"/", "-e", filepath.Join(prefix, "error.log"))
	cmd.ExtraFiles = []*os.File{lf} // fd 3
	cmd.Env = append(os.Environ(), "NGINX=3;")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting nginx: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		brHTTP.CloseIdleConnections()
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful stop of our own master
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			t.Logf("nginx output:\n%s\nerror.log:\n%s", out.String(), log)
		}
	})
	u := "http://" + ln.Addr().String() + "/f.bin"
	brWaitUp(t, u, done)
	return u
}

// brServeContent serves file with http.ServeContent.
func brServeContent(t *testing.T, file []byte) string {
	t.Helper()
	mod := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f.bin", mod, bytes.NewReader(file))
	}))
	t.Cleanup(func() {
		brHTTP.CloseIdleConnections()
		srv.Close()
	})
	return srv.URL + "/f.bin"
}

// brWaitUp polls u until it answers 200 or the server exits.
func brWaitUp(t *testing.T, u string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := brHTTP.Head(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case e := <-done:
			t.Fatalf("server exited before answering %s: %v", u, e)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up after 15s: %v", u, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// brRangeSets are the vector reads asked of every server.
func brRangeSets() map[string][]client.Range {
	rng := rand.New(rand.NewPCG(13, 14))
	sets := map[string][]client.Range{}
	// 1000 distinct baskets 4 KiB apart (none merged, none coalesced):
	// 1000 ranges in one request when the plan allows.
	var baskets []client.Range
	for _, slot := range rng.Perm(brFileSize / 8192)[:1000] {
		baskets = append(baskets, client.Range{Off: int64(slot) * 8192, Len: 4096})
	}
	sets["1000x4KiB"] = baskets
	// 1000 at random offsets: many overlap or touch.
	baskets = nil
	for range 1000 {
		baskets = append(baskets, client.Range{Off: rng.Int64N(brFileSize - 4096), Len: 4096})
	}
	sets["1000x4KiB-random"] = baskets
	sets["overlapping-adjacent"] = []client.Range{
		{Off: 0, Len: 100}, {Off: 50, Len: 100}, {Off: 150, Len: 50}, {Off: 200, Len: 0}, {Off: 1000, Len: 1000},
		{Off: 1000, Len: 1000}, {Off: 1999, Len: 2}, {Off: 4090, Len: 20}, {Off: brFileSize - 10, Len: 10}, {Off: 300, Len: 1},
	}
	var mixed []client.Range
	for range 300 {
		n := 1 + rng.Int64N([]int64{10, 1000, 256 << 10}[rng.IntN(3)])
		mixed = append(mixed, client.Range{Off: rng.Int64N(brFileSize - n), Len: n})
	}
	sets["mixed"] = mixed
	sets["one"] = []client.Range{{Off: 12345, Len: 67890}}
	sets["large"] = []client.Range{{Off: 100, Len: 3 << 20}, {Off: 5 << 20, Len: 3 << 20}}
	return sets
}

var brPlans = map[string]client.PlanOptions{
	"default": client.DefaultPlanOptions(),
	// As many ranges per request as the servers above take.
	"wide": {Gap: 0, MaxRanges: 2000, MaxHeader: 60000, MaxBatchBytes: 64 << 20},
	// Many small requests, long ranges split.
	"narrow": {Gap: 0, MaxRanges: 16, MaxHeader: 7000, MaxBatchBytes: 256 << 10},
}

// brAnswer is what one response looked like.
type brAnswer struct {
	status        int
	ctype         string
	parts, ranges int
	head          string
}

// brReadV plans want, fetches every batch and checks every byte.
func brReadV(t *testing.T, u string, file []byte, want []client.Range, o client.PlanOptions) []brAnswer {
	t.Helper()
	plan, err := client.PlanReadV(want, int64(len(file)), o)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([][]byte, len(want))
	for i, w := range want {
		dst[i] = make([]byte, w.Len)
	}
	s, err := client.NewScatter(want, dst)
	if err != nil {
		t.Fatal(err)
	}
	var answers []brAnswer
	for _, b := range plan.Batches {
		a, err := brFetch(u, b.Header(), len(b.Ranges), s.Part)
		if err != nil {
			t.Fatalf("batch of %d ranges: %v", len(b.Ranges), err)
		}
		answers = append(answers, a)
	}
	if m := s.Missing(); m != nil {
		t.Fatalf("%d ranges missing after all batches, first %+v", len(m), m[0])
	}
	brCompare(t, file, want, dst, s)
	return answers
}

// brFetch sends one GET with a Range header and parses the answer.
func brFetch(u, rangeHdr string, ranges int, part func(off, n int64, r io.Reader) error) (brAnswer, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return brAnswer{}, err
	}
	req.Header.Set("Range", rangeHdr)
	resp, err := brHTTP.Do(req)
	if err != nil {
		return brAnswer{}, err
	}
	defer resp.Body.Close()
	a := brAnswer{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), ranges: ranges}
	rec := &brRecorder{max: 160}
	body := io.TeeReader(resp.Body, rec)
	err = client.ReadRangeBody(resp.StatusCode, resp.Header, body, func(off, n int64, r io.Reader) error {
		a.parts++
		return part(off, n, r)
	})
	a.head = rec.String()
	if err != nil {
		return a, fmt.Errorf("status %d, Content-Type %q, body starts %q: %w", a.status, a.ctype, a.head, err)
	}
	return a, nil
}

// brRecorder keeps the first max bytes written to it.
type brRecorder struct {
	max int
	buf bytes.Buffer
}

func (r *brRecorder) Write(p []byte) (int, error) {
	if room := r.max - r.buf.Len(); room > 0 {
		r.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (r *brRecorder) String() string { return r.buf.String() }

func brCompare(t *testing.T, file []byte, want []client.Range, dst [][]byte, s *client.Scatter) {
	t.Helper()
	for i, w := range want {
		if got := s.Filled(i); got != w.Len {
			t.Fatalf("range %d (%+v): %d bytes filled", i, w, got)
		}
		if !bytes.Equal(dst[i], file[w.Off:w.Off+w.Len]) {
			j := 0
			for dst[i][j] == file[w.Off+int64(j)] {
				j++
			}
			t.Fatalf("range %d (%+v): first wrong byte at %d", i, w, w.Off+int64(j))
		}
	}
}

// brRaw sends want as one Range header exactly as given (unsorted,
// overlapping, adjacent: what a naive client sends) and checks that
// whatever the server makes of it parses and fills every range. A server
// may also refuse the lot with 200 and the whole file.
func brRaw(t *testing.T, u string, file []byte, want []client.Range) brAnswer {
	t.Helper()
	dst := make([][]byte, len(want))
	var specs []string
	for i, w := range want {
		dst[i] = make([]byte, w.Len)
		if w.Len > 0 {
			specs = append(specs, strconv.FormatInt(w.Off, 10)+"-"+strconv.FormatInt(w.Off+w.Len-1, 10))
		}
	}
	s, err := client.NewScatter(want, dst)
	if err != nil {
		t.Fatal(err)
	}
	a, err := brFetch(u, "bytes="+strings.Join(specs, ","), len(specs), s.Part)
	if a.status == http.StatusOK && errors.Is(err, client.ErrUnusableRanges) {
		return a
	}
	if err != nil {
		t.Fatal(err)
	}
	brCompare(t, file, want, dst, s)
	return a
}

func brRun(t *testing.T, u string, file []byte) {
	for name, want := range brRangeSets() {
		for pname, o := range brPlans {
			t.Run(name+"/"+pname, func(t *testing.T) {
				answers := brReadV(t, u, file, want, o)
				parts, ranges := 0, 0
				for _, a := range answers {
					parts += a.parts
					ranges += a.ranges
				}
				t.Logf("%d requests, %d ranges asked, %d parts received; first answer %d %q, body starts %q",
					len(answers), ranges, parts, answers[0].status, answers[0].ctype, answers[0].head)
			})
		}
	}
	t.Run("raw", func(t *testing.T) {
		sets := brRangeSets()
		for _, name := range []string{"overlapping-adjacent", "mixed", "1000x4KiB-random"} {
			a := brRaw(t, u, file, sets[name])
			t.Logf("%s unplanned: status %d, %d ranges asked, %d parts received", name, a.status, a.ranges, a.parts)
		}
		// Two overlapping halves add up to more than the file.
		a := brRaw(t, u, file, []client.Range{{Off: 0, Len: brFileSize/2 + 1}, {Off: brFileSize / 2, Len: brFileSize / 2}})
		t.Logf("ranges adding up to more than the file: status %d, %d parts", a.status, a.parts)
	})
}

func TestByterangesWanda(t *testing.T) {
	dir, file := brData(t)
	brRun(t, brServeWanda(t, dir), file)
}

func TestByterangesNginx(t *testing.T) {
	dir, file := brData(t)
	brRun(t, brServeNginx(t, dir), file)
}

func TestByterangesServeContent(t *testing.T) {
	_, file := brData(t)
	brRun(t, brServeContent(t, file), file)
}

package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// cmdTimeout bounds every client subprocess.
const cmdTimeout = 2 * time.Minute

var (
	// tmpRoot holds what the whole package run shares (the demo data); it
	// is made by TestMain and removed after the tests.
	tmpRoot  string
	demoOnce sync.Once
	demoDir  string
	demoErr  error
)

func TestMain(m *testing.M) {
	// Started by startChild: this process is `wanda ARGS...`.
	testproc.RunIfChild()
	var err error
	tmpRoot, err = os.MkdirTemp("", "wanda-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// demoData generates the demo data once per package run (it includes a
// 64 MiB file) and returns its directory. Tests must not modify it.
func demoData(t *testing.T) string {
	t.Helper()
	demoOnce.Do(func() {
		start := time.Now()
		demoDir = filepath.Join(tmpRoot, "store")
		_, demoErr = demo.Generate(demoDir)
		t.Logf("generated demo data in %v", time.Since(start).Round(time.Millisecond))
	})
	if demoErr != nil {
		t.Fatalf("demo.Generate: %v", demoErr)
	}
	return demoDir
}

// server is a wanda server running in-process for one test.
type server struct {
	URL     string // http://127.0.0.1:port, no trailing slash
	Store   string // local directory of the read-only /store export
	Scratch string // local directory of the writable /scratch export
	Ranges  *rangeLog
}

// startServer serves /store (the demo data, read-only) and /scratch (an
// empty writable directory) on a fresh loopback port until the test ends.
func startServer(t *testing.T) *server {
	t.Helper()
	store := demoData(t)
	scratch := t.TempDir()
	ranges := &rangeLog{}
	srv := testserver.StartWith(t,
		testserver.Options{Listener: func(ln net.Listener) net.Listener { return sniffListener{ln, ranges} }},
		config.Export{Prefix: "/store", Path: store, ReadOnly: true},
		config.Export{Prefix: "/scratch", Path: scratch},
	)
	return &server{URL: srv.URL, Store: store, Scratch: scratch, Ranges: ranges}
}

// httpClient talks to the test server directly, never through a proxy.
var httpClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableCompression: true},
	Timeout:   30 * time.Second,
}

// requireTool skips the test when the executable is missing, or fails it
// when running in CI (CI set), where every client must be installed.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, fmt.Sprintf("%s not found in PATH (%v)", name, err))
	}
	return p
}

// missing skips (locally) or fails (in CI) for an absent prerequisite.
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("interop prerequisite missing in CI: %s", why)
	}
	t.Skipf("skipping: %s (install it to run this test; with CI set this is a failure)", why)
}

// result is a finished subprocess.
type result struct {
	Stdout, Stderr []byte
	Err            error
}

// run runs a client with cmdTimeout and without proxy settings.
func run(t *testing.T, dir, name string, args ...string) result {
	t.Helper()
	return runFor(t, cmdTimeout, dir, name, args...)
}

// runFor runs a client with the given timeout; a timeout is reported in
// the result's Err (errTimeout).
func runFor(t *testing.T, timeout time.Duration, dir, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w after %v (%v)", errTimeout, timeout, err)
	}
	t.Logf("$ %s %s  [%v, %v]", name, shortArgs(args), time.Since(start).Round(time.Millisecond), exitStatus(err))
	return result{stdout.Bytes(), stderr.Bytes(), err}
}

// errTimeout marks a client killed for running past its timeout.
var errTimeout = errors.New("timed out")

// mustRun is run that fails the test on a non-zero exit.
func mustRun(t *testing.T, dir, name string, args ...string) result {
	t.Helper()
	r := run(t, dir, name, args...)
	if r.Err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, shortArgs(args), r.Err, r.Stdout, r.Stderr)
	}
	return r
}

func exitStatus(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// shortArgs abbreviates huge arguments (a 1024-range header) for logs.
func shortArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if len(a) > 120 {
			a = a[:100] + fmt.Sprintf("...(%d bytes)", len(a))
		}
		if strings.ContainsAny(a, " ,") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(k), "_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1")
}

// readFile reads a file of the test's data or fails.
func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameBytes reports the first difference between got and want.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Errorf("%s: %s", what, d)
	}
}

// metricSum adds the values of the samples of metric whose label set
// contains every one of labels (`code="206"`), read from GET /metrics.
func metricSum(t *testing.T, base, metric string, labels ...string) float64 {
	t.Helper()
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", resp.StatusCode)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	if !found {
		return 0
	}
	return sum
}

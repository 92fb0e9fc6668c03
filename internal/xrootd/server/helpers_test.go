package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// testServer is a server on 127.0.0.1 exporting dir as /store.
type testServer struct {
	*Server
	addr  string // host:port
	dir   string // the export's directory
	conns *atomic.Int64
	stop  func() // stops the server and waits for it (also at the test's end)
}

// countingListener counts the connections a server accepted.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// URL returns the root:// URL of the logical path p, in the usual
// root://host//store/f form.
func (ts *testServer) URL(p string) string {
	return "root://" + ts.addr + "//" + strings.TrimPrefix(p, "/")
}

type serverOpt func(*Options)

// startServer serves a fresh temporary directory as the writable export
// /store until the test ends.
func startServer(t *testing.T, opts ...serverOpt) *testServer {
	t.Helper()
	if _, seen := leakChecked.LoadOrStore(t, true); !seen {
		// Registered before the first server's own cleanup, so it runs
		// after every server of the test has stopped.
		t.Cleanup(func() { leakChecked.Delete(t); noLeaks(t) })
	}
	dir := t.TempDir()
	be, err := posix.New(dir, posix.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	ns, err := storage.NewNamespace(storage.Export{Prefix: "/store", Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Namespace: ns, Auth: auth.AllowAll{}, Log: testLogger(t)}
	for _, f := range opts {
		f(&o)
	}
	s := NewServer(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := new(atomic.Int64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, countingListener{ln, n}) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &testServer{Server: s, addr: ln.Addr().String(), dir: dir, conns: n, stop: stop}
}

var leakChecked sync.Map // *testing.T -> true

// noLeaks fails when goroutines of the servers outlive them.
func noLeaks(t *testing.T) {
	t.Helper()
	var stacks string
	for i := 0; i < 200; i++ {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		leaked := false
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "xrootd/server.(*conn)") || strings.Contains(g, "xrootd/server.(*Server)") {
				leaked = true
			}
		}
		if !leaked {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("server goroutines left after shutdown:\n%s", stacks)
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("XRD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// writeFile puts a file of n pseudo-random bytes under the export and
// returns its content.
func (ts *testServer) writeFile(t *testing.T, rel string, n int) []byte {
	t.Helper()
	b := randomBytes(n, uint64(n)+uint64(len(rel)))
	p := filepath.Join(ts.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// tool runs an installed XRootD client tool, skipping the test when it is
// not installed.
type toolResult struct {
	out  string
	err  error
	code int
}

func lookTool(name string) (string, error) { return exec.LookPath(name) }

// requireTool finds an installed tool, or skips the test; in CI
// (CI=true, where .ci/run installs the peers) a missing tool fails it.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := lookTool(name)
	if err != nil {
		missing(t, name+" not installed")
	}
	return p
}

// missing skips a test whose peer is not installed, or fails it in CI.
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: .ci/run installs it)", why)
	}
	t.Skip(why)
}

func runTool(t *testing.T, timeout time.Duration, name string, args ...string) toolResult {
	t.Helper()
	return runToolEnv(t, timeout, nil, name, args...)
}

// runToolEnv runs a tool with extra environment variables (XRD_*).
func runToolEnv(t *testing.T, timeout time.Duration, env []string, name string, args ...string) toolResult {
	t.Helper()
	p := requireTool(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Env = append(append(os.Environ(), "XRD_CONNECTIONRETRY=1", "XRD_REQUESTTIMEOUT=30", "XRD_STREAMERRORWINDOW=0"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: timed out after %v; output:\n%s", name, strings.Join(args, " "), timeout, out.String())
	}
	return toolResult{out: out.String(), err: err, code: code}
}

// mustRun runs a tool and fails the test when it exits non-zero.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	return mustRunEnv(t, nil, name, args...)
}

func mustRunEnv(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	r := runToolEnv(t, 2*time.Minute, env, name, args...)
	if r.err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), r.err, r.out)
	}
	return r.out
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d expected", path, len(got), len(want))
	}
}

var _ = io.EOF

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

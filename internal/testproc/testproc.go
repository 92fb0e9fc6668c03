// Package testproc runs this test binary as a real `wanda` process for
// tests that need one (its memory its own, SIGKILL, restart): RunIfChild
// in the test package's init or TestMain, StartProcess in the test. It is
// apart from testserver because it imports the command line, whose own
// tests use testserver.
package testproc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/cli"
)

// ChildEnv, set in a child's environment, makes a test binary that calls
// RunIfChild run as `wanda ARGS...`: a real server process, whose memory
// is its own and which a test can SIGKILL, without a separately built
// binary.
const ChildEnv = "WANDA_TEST_CHILD"

// RunIfChild runs the wanda command line (as cmd/wanda does) and exits
// when ChildEnv is set; call it from the test package's init or TestMain.
func RunIfChild() {
	if os.Getenv(ChildEnv) == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Process is a `wanda` process started by a test (StartProcess).
type Process struct {
	URL  string // advertised URL, from the "serving" log line ("redirector serving", ...)
	Addr string // its host:port
	cmd  *exec.Cmd
	done chan struct{}

	mu   sync.Mutex
	logs bytes.Buffer
}

// StartProcess runs this test binary as `wanda ARGS...` (the package must
// call RunIfChild) with env (nil: this process's), waits until it logs
// "serving" (ARGS must ask for JSON logs at info level) and answers
// /healthz. The test's end stops it (SIGTERM, then SIGKILL) and prints its
// log if the test failed.
func StartProcess(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	if env == nil {
		env = os.Environ()
	}
	return StartExe(t, os.Args[0], append(env, ChildEnv+"=1"), args...)
}

// StartExe is StartProcess of the executable exe (a built bin/wanda)
// with exactly env.
func StartExe(t testing.TB, exe string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Env = env
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start wanda %s: %v", strings.Join(args, " "), err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.logs.Write(line)
			p.logs.WriteByte('\n')
			p.mu.Unlock()
			var rec struct{ Msg, URL string }
			if json.Unmarshal(line, &rec) == nil && strings.HasSuffix(rec.Msg, "serving") && rec.URL != "" {
				select {
				case urls <- rec.URL:
				default:
				}
			}
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("wanda %s log:\n%s", strings.Join(args, " "), p.Log())
		}
	})
	select {
	case p.URL = <-urls:
	case <-p.done:
		t.Fatalf("wanda %s exited before serving: %v\n%s", strings.Join(args, " "), p.cmd.ProcessState, p.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("wanda %s did not log \"serving\" within 30s\n%s", strings.Join(args, " "), p.Log())
	}
	p.Addr = strings.TrimPrefix(strings.TrimPrefix(p.URL, "http://"), "https://")
	// Readiness only: a child serving https has a test's own certificate,
	// which the tests check themselves.
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		if resp, err := hc.Get(p.URL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("wanda %s: /healthz did not answer 200 within 10s", strings.Join(args, " "))
		}
		time.Sleep(wait)
	}
	return p
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Log is what the process logged so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// RSS is the process's VmRSS in KiB (0 when it cannot be read).
func (p *Process) RSS() int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// Done is closed when the process has exited (killed, or by itself).
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed process did not exit within 10s")
	}
}

// Stop ends the process as an operator does (SIGTERM; SIGKILL after 10s)
// and waits for it.
func (p *Process) Stop() { p.stop() }

// stop ends the process: SIGTERM, then SIGKILL after 10s.
func (p *Process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

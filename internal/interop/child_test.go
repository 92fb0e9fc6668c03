package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/cli"
	"github.com/wanda-fed/wanda/internal/storage/posix"
)

// childEnv, set in a child's environment, makes the test binary run as
// `wanda ARGS...` (TestMain): a real server process the test can SIGKILL.
const childEnv = "WANDA_INTEROP_CHILD"

// runChild is main() of cmd/wanda.
func runChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// child is a `wanda` process started by a test.
type child struct {
	cmd    *exec.Cmd
	URL    string // advertised URL, from the "serving" log line
	exited chan struct{}

	mu   sync.Mutex
	logs bytes.Buffer
}

// startChild runs `wanda ARGS...` (which must log in JSON: --log-format
// json or log.format in its config) and waits until it serves. The test's
// end stops it (SIGTERM, then SIGKILL) and prints its log if it failed.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	c := &child{exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], args...)
	c.cmd.Env = append(cleanEnv(), childEnv+"=1")
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start wanda %s: %v", strings.Join(args, " "), err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			c.mu.Lock()
			c.logs.Write(line)
			c.logs.WriteByte('\n')
			c.mu.Unlock()
			var rec struct{ Msg, URL string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "serving" && rec.URL != "" {
				select {
				case urls <- rec.URL:
				default:
				}
			}
		}
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("wanda %s log:\n%s", strings.Join(args, " "), c.Log())
		}
	})
	select {
	case c.URL = <-urls:
	case <-c.exited:
		t.Fatalf("wanda %s exited before serving: %v\n%s", strings.Join(args, " "), c.cmd.ProcessState, c.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("wanda %s did not log \"serving\" within 30s\n%s", strings.Join(args, " "), c.Log())
	}
	waitFor(t, 10*time.Second, "/healthz of "+c.URL, func() bool {
		resp, err := httpClient.Get(c.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return c
}

// Log is what the child logged so far.
func (c *child) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed server did not exit within 10s")
	}
}

// stop ends the child: SIGTERM, then SIGKILL after 10s.
func (c *child) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(wait)
	}
}

// tempFiles lists the upload temp files below dir (path -> size).
func tempFiles(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), posix.TempPrefix) {
			if fi, err := d.Info(); err == nil {
				out[p] = fi.Size()
			}
		}
		return nil
	})
	return out
}

package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/cli"
)

// cliEnv makes this test binary run the wanda command line (as
// cmd/wanda does) instead of the tests: startChildServer runs a real
// `wanda server` process whose memory can be measured alone.
const cliEnv = "WANDA_APP_TEST_CLI"

func init() {
	if os.Getenv(cliEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
}

// childServer is a `wanda server` child process.
type childServer struct {
	URL, Addr string
	pid       int
}

// startChildServer runs `wanda server` exporting dir as /data on a port
// of its choosing, with extra flags, until the test ends.
func startChildServer(t *testing.T, dir string, extra ...string) *childServer {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"server", "--export", "/data=" + dir, "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}, extra...)...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	urls := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var line struct{ Msg, URL string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				urls <- line.URL
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	select {
	case u := <-urls:
		return &childServer{URL: u, Addr: strings.TrimPrefix(u, "http://"), pid: cmd.Process.Pid}
	case <-exited:
		t.Fatal("wanda server exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("wanda server did not start within 30 s")
	}
	return nil
}

// rss is the child's VmRSS in KiB.
func (s *childServer) rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.pid) + "/status")
	if err != nil {
		t.Error(err)
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

package xrdpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ReadyTimeout bounds how long a daemon may take to start listening.
const ReadyTimeout = 20 * time.Second

// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
const StopTimeout = 5 * time.Second

// errPortInUse is a daemon that could not bind a port another process
// took between FreePort and its start: the start is retried.
var errPortInUse = errors.New("address already in use")

// errCrashed is a daemon killed by a signal before it was ready (XRootD
// 5.5.3's xrootd with the proxy cache plugins, XCache, sometimes dies of
// a segmentation fault in its first milliseconds, before it logs
// anything): the start is retried too.
var errCrashed = errors.New("crashed while starting")

// Command is a daemon to start.
type Command struct {
	// Name names it in errors and logs ("xrootd", "cmsd of server-1").
	Name string
	// Args is the command line, Args[0] looked up in PATH.
	Args []string
	// Listen are addresses (host:port) the daemon is ready once every one
	// accepts a TCP connection.
	Listen []string
	// Ready, when set, must also hold (e.g. a line in its log); it is
	// polled with the addresses.
	Ready func() bool
	// LogPath is the daemon's log file, quoted when it fails to start.
	LogPath string
	// Log receives a line when it started; nil: none.
	Log *slog.Logger
	// Env is added to this process's environment for the daemon.
	Env []string
}

// Daemon is a running child process in a process group of its own.
type Daemon struct {
	name    string
	cmd     *exec.Cmd
	out     *lockedBuffer
	logPath string
	exited  chan struct{} // closed once reaped; waitErr is then set
	waitErr error
	once    sync.Once
}

// StartDaemon runs c.Args and waits until it is ready: every c.Listen
// address accepts connections and c.Ready holds. It fails when the
// process exits first, when ReadyTimeout passes or when ctx ends; the
// process is then stopped and the error quotes the end of its log. ctx
// bounds the start only: the daemon runs until Stop.
func StartDaemon(ctx context.Context, c Command) (*Daemon, error) {
	if len(c.Args) == 0 {
		return nil, fmt.Errorf("start %s: no command", c.Name)
	}
	d := &Daemon{name: c.Name, out: &lockedBuffer{}, logPath: c.LogPath, exited: make(chan struct{})}
	d.cmd = exec.Command(c.Args[0], c.Args[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if len(c.Env) > 0 {
		d.cmd.Env = append(os.Environ(), c.Env...)
	}
	// Its own process group: Stop reaches whatever it forks.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Children that keep the output pipe open must not hang Wait.
	d.cmd.WaitDelay = 2 * time.Second
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Name, err)
	}
	go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()
	if err := d.waitReady(ctx, c); err != nil {
		d.Stop()
		tail := Tail(c.LogPath, 8)
		if out := strings.TrimSpace(d.out.String()); out != "" {
			tail = strings.TrimSpace(tail + " | " + out)
		}
		var ee *exec.ExitError
		switch {
		case strings.Contains(tail, "already in use"):
			err = fmt.Errorf("%w (%w)", err, errPortInUse)
		case errors.As(err, &ee) && !ee.Exited():
			err = fmt.Errorf("%w (%w)", err, errCrashed)
		}
		return nil, fmt.Errorf("%s on %s: %w; log: %s", c.Name, strings.Join(c.Listen, ", "), err, strings.ReplaceAll(tail, "\n", " | "))
	}
	if c.Log != nil {
		c.Log.Info("peer started", "peer", c.Name, "addr", strings.Join(c.Listen, " "), "pid", d.cmd.Process.Pid)
	}
	return d, nil
}

// waitReady polls c's addresses and condition.
func (d *Daemon) waitReady(ctx context.Context, c Command) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	pending := append([]string(nil), c.Listen...)
	for {
		for len(pending) > 0 {
			conn, err := net.DialTimeout("tcp", pending[0], time.Second)
			if err != nil {
				break
			}
			conn.Close()
			pending = pending[1:]
		}
		if len(pending) == 0 && (c.Ready == nil || c.Ready()) {
			return nil
		}
		select {
		case <-d.exited:
			err := d.waitErr
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("exited before it was ready: %w", err)
		case <-ctx.Done():
			what := "not ready"
			if len(pending) > 0 {
				what = "not listening on " + pending[0]
			}
			return fmt.Errorf("%s after %v: %w", what, ReadyTimeout, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// Pid is the daemon's process id (its process group's too).
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Stop ends the daemon's process group (SIGTERM, SIGKILL after
// StopTimeout) and waits for the daemon. It may be called more than once.
func (d *Daemon) Stop() {
	d.once.Do(func() {
		pgid := d.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(StopTimeout):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-d.exited
		}
	})
}

// LogTail is the last n lines of the daemon's log file.
func (d *Daemon) LogTail(n int) string { return Tail(d.logPath, n) }

// Tail is the last n lines of a file ("" if it cannot be read).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logHas returns a Ready condition: path contains every one of subs.
func logHas(path string, subs ...string) func() bool {
	return func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		for _, s := range subs {
			if !bytes.Contains(b, []byte(s)) {
				return false
			}
		}
		return true
	}
}

// FreePort returns a loopback port that was free a moment ago, for a
// daemon that binds its own socket (XRootD cannot be handed a listener).
// Something else may take it meanwhile: the daemon then fails to start
// and Start tries other ports.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	var out []int
	for len(out) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		dup := false
		for _, q := range out {
			dup = dup || q == p
		}
		if !dup {
			out = append(out, p)
		}
	}
	return out, nil
}

// retryPorts runs start with n fresh ports, again (up to three times in
// all) while it fails for a port taken meanwhile or a crash at start.
func retryPorts(n int, start func(ports []int) error) error {
	return retryOn(func() error {
		ports, err := freePorts(n)
		if err != nil {
			return err
		}
		return start(ports)
	}, errPortInUse, errCrashed)
}

// retryCrashed runs start again (up to three times in all) while it
// fails for a crash at start: for daemons that must keep their ports.
func retryCrashed(start func() error) error { return retryOn(start, errCrashed) }

// retryOn runs start, again (up to three times in all) while it fails
// with one of retryable.
func retryOn(start func() error, retryable ...error) error {
	var err error
	for range 3 {
		if err = start(); !slices.ContainsFunc(retryable, func(r error) bool { return errors.Is(err, r) }) {
			return err
		}
	}
	return err
}

// lockedBuffer collects a child's output; safe to read while written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil // enough to quote; the rest is in the log
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

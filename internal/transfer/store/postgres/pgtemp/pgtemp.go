// Package pgtemp runs a throw-away PostgreSQL server: the distribution's
// (Debian's postgresql: initdb, postgres and pg_ctl, found on PATH or
// under /usr/lib/postgresql/*/bin), in a temporary directory, listening
// on 127.0.0.1 on a port the OS picked (PostgreSQL cannot be handed a
// listener, so a start that lost the port to another process in the
// meantime is retried on a new one), its unix socket in that directory,
// asking for a password, stopped (pg_ctl stop -m immediate: there is
// nothing to keep) and removed by the function Launch returns. initdb and
// postgres refuse to run as root; as root they run as the `postgres`
// user (or `nobody`) through setpriv, as xrdpeer does for XRootD's
// daemons. The tests use it through pgtest; `wanda bench transfers`
// directly (no testing package in the binary).
package pgtemp

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// installHint is what to install for the server.
const installHint = "apt-get install postgresql"

// StartTimeout bounds initdb, and the server's start and stop.
const StartTimeout = 2 * time.Minute

// ErrMissing: PostgreSQL is not installed, or cannot be run here.
var ErrMissing = errors.New("PostgreSQL missing")

// Launch starts a server in a fresh temporary directory and returns the
// DSN of an empty database on it
// ("postgres://wanda:PASSWORD@127.0.0.1:PORT/wanda"), and stop, which
// stops the server and removes its files. An error wrapping ErrMissing says PostgreSQL is not
// installed (or cannot run as root here).
func Launch(ctx context.Context) (dsn string, stop func() error, err error) {
	bin, err := binDir()
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrMissing, err)
	}
	acct, err := runAs()
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrMissing, err)
	}
	dir, err := os.MkdirTemp("", "wanda-pgtest-")
	if err != nil {
		return "", nil, err
	}
	fail := func(err error) (string, func() error, error) {
		os.RemoveAll(dir)
		return "", nil, err
	}
	if err := acct.reach(dir); err != nil {
		return fail(err)
	}
	password := rand.Text()
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if err := acct.own(dir, pwfile); err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	initdb := acct.command(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "wanda", "--pwfile", pwfile,
		"--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	os.Remove(pwfile)

	var srv *server
	for try := 0; ; try++ {
		srv, err = start(ctx, acct, bin, dir, data)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || try == 4 {
			return fail(err)
		}
	}
	stop = func() error {
		defer os.RemoveAll(dir)
		return srv.stop()
	}
	dsn = (&url.URL{Scheme: "postgres", User: url.UserPassword("wanda", password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.port)), Path: "/postgres",
		RawQuery: "sslmode=disable"}).String()
	if err := srv.ready(ctx, dsn); err != nil {
		_ = stop()
		return "", nil, err
	}
	if dsn, err = CreateDatabase(ctx, dsn, "wanda"); err != nil {
		_ = stop()
		return "", nil, err
	}
	return dsn, stop, nil
}

var dbName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// CreateDatabase creates the empty database name on the server of dsn
// (one from Launch) and returns its DSN.
func CreateDatabase(ctx context.Context, dsn, name string) (string, error) {
	if !dbName.MatchString(name) {
		return "", fmt.Errorf("pgtemp: database name %q", name)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("pgtemp: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtemp: create database %s: %w", name, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("pgtemp: the server's DSN does not parse") // the DSN holds the password: not in messages
	}
	u.Path = "/" + name
	return u.String(), nil
}

// binDir finds the directory holding initdb, postgres and pg_ctl.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if haveAll(dir) {
			return dir, nil
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && haveAll(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	// Debian keeps them off PATH, one directory per major version.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestV := "", -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err == nil && v > bestV && haveAll(d) {
			best, bestV = d, v
		}
	}
	if best == "" {
		return "", fmt.Errorf("PostgreSQL's initdb, postgres and pg_ctl not found (%s)", installHint)
	}
	return best, nil
}

func haveAll(dir string) bool {
	for _, b := range []string{"initdb", "postgres", "pg_ctl"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// account is the user the server runs as.
type account struct {
	prefix   []string // setpriv ... when this process is root
	uid, gid int      // -1: this process's user
}

// runAs picks the user to run the server as: this process's, or when it
// is root (which initdb and postgres refuse) `postgres`, else `nobody`.
func runAs() (account, error) {
	if os.Geteuid() != 0 {
		return account{uid: -1, gid: -1}, nil
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		return account{}, errors.New("PostgreSQL refuses to run as root and there is no setpriv to run it as another user")
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return account{
			prefix: []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups"},
			uid:    uid, gid: gid,
		}, nil
	}
	return account{}, errors.New("PostgreSQL refuses to run as root and there is no `postgres` or `nobody` user to run it as")
}

func (a account) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, a.prefix...), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "PGTZ=UTC")
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// own gives paths to the account's user.
func (a account) own(paths ...string) error {
	if a.uid < 0 {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, a.uid, a.gid); err != nil {
			return err
		}
	}
	return nil
}

// reach checks the account's user can get to dir: every directory above
// it must let others through (a private TMPDIR does not).
func (a account) reach(dir string) error {
	if a.uid < 0 {
		return nil
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgtemp: the server's user cannot reach %s (%s is %v): point TMPDIR at a directory others can traverse", dir, d, fi.Mode().Perm())
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// server is a running postgres.
type server struct {
	acct    account
	bin     string
	data    string
	log     string
	port    int
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has ended
	waitErr error
}

var errPortTaken = errors.New("port taken")

// start starts postgres on a free port; errPortTaken when the port was
// taken before the server bound it.
func start(ctx context.Context, acct account, bin, dir, data string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s := &server{acct: acct, bin: bin, data: data, log: logPath, port: port, exited: make(chan struct{})}
	// Not CommandContext: the server outlives this call.
	s.cmd = acct.command(context.Background(), filepath.Join(bin, "postgres"), "-D", data,
		"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB", "-c", "timezone=UTC",
		"-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtemp: start postgres: %w", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	// Wait for the server to listen, or to die.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.exited:
			out, _ := os.ReadFile(logPath)
			if bytes.Contains(out, []byte("could not bind")) || bytes.Contains(out, []byte("in use")) {
				return nil, fmt.Errorf("pgtemp: port %d: %w", port, errPortTaken)
			}
			return nil, fmt.Errorf("pgtemp: postgres exited (%v):\n%s", s.waitErr, tail(out))
		case <-ctx.Done():
			s.kill()
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("pgtemp: postgres did not listen on port %d: %w\n%s", port, ctx.Err(), tail(out))
		case <-tick.C:
		}
	}
}

// ready waits until the server accepts a login (it listens before it has
// finished starting up).
func (s *server) ready(ctx context.Context, dsn string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var err error
	for {
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, dsn); err == nil {
			return c.Close(ctx)
		}
		select {
		case <-s.exited:
			out, _ := os.ReadFile(s.log)
			return fmt.Errorf("pgtemp: postgres exited (%v):\n%s", s.waitErr, tail(out))
		case <-ctx.Done():
			return fmt.Errorf("pgtemp: postgres not ready: %w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// stop stops the server at once (pg_ctl stop -m immediate) and waits
// for it to exit; it kills it if that fails.
func (s *server) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	var err error
	if out, perr := s.acct.command(ctx, filepath.Join(s.bin, "pg_ctl"), "stop", "-D", s.data, "-m", "immediate", "-w").CombinedOutput(); perr != nil {
		err = fmt.Errorf("pg_ctl stop: %v: %s", perr, out)
		s.kill()
	}
	select {
	case <-s.exited:
	case <-ctx.Done():
		s.kill()
		<-s.exited
	}
	return err
}

// kill kills the server's process.
func (s *server) kill() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
}

// tail is the end of a log, for a failure message.
func tail(b []byte) string {
	const n = 4000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

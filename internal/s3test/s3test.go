// Package s3test runs a real S3 server for tests: MinIO, built from its Go
// module (github.com/minio/minio at MinioVersion) and started per test on
// 127.0.0.1 with a port MinIO picks itself (":0"), in a temporary
// directory, with throw-away credentials.
//
// The binary is looked up in $WANDA_MINIO, then in the cache
// ($HOME/.cache/wanda-test/minio-<MinioVersion>/minio, or under
// $WANDA_TEST_CACHE), and built there with `go install` when missing (a
// few minutes on 2 cores; .ci/run builds it once before the tests). A
// server that cannot be built or started fails the test, it never skips
// it: the S3 backend is only tested against a real server.
package s3test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinioVersion is the github.com/minio/minio module version the tests run
// (MinIO tags no semver versions; this is the proxy's @latest of
// 2026-02-12). .ci/run reads it from here.
const MinioVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

// Region is the region the test server answers for.
const Region = "us-east-1"

// Server is a running MinIO.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	Host      string // 127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // its data directory
	// Client is a minio-go client with the root credentials, for tests
	// that prepare or inspect buckets directly.
	Client *minio.Client

	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	logs   strings.Builder
}

// Env returns the standard AWS variables that point a client at s.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"AWS_ENDPOINT_URL=" + s.Endpoint,
	}
}

var buildMu sync.Mutex

// Binary returns the MinIO binary, building it when missing.
func Binary() (string, error) {
	if p := os.Getenv("WANDA_MINIO"); p != "" {
		return p, nil
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "minio")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Test binaries of several packages may build at once: one at a time.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(os.Stderr, "s3test: building MinIO %s into %s (minutes)\n", MinioVersion, dir)
	cmd := exec.Command("go", "install", "github.com/minio/minio@"+MinioVersion)
	cmd.Dir = dir // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building MinIO failed: %w\n%s", err, out)
	}
	return bin, nil
}

func cacheDir() (string, error) {
	base := os.Getenv("WANDA_TEST_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home directory for the MinIO cache (set WANDA_TEST_CACHE): %w", err)
		}
		base = filepath.Join(home, ".cache", "wanda-test")
	}
	return filepath.Join(base, "minio-"+MinioVersion), nil
}

var apiLine = regexp.MustCompile(`https?://127\.0\.0\.1:([0-9]+)`)

// Start starts a MinIO on 127.0.0.1 for the test and stops it at the
// test's end; it fails the test when MinIO cannot run.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		if t.Failed() {
			t.Logf("MinIO's output:\n%s", s.Logs())
		}
	})
	return s
}

// Main is a package's TestMain with one MinIO for all its tests (each
// makes its own bucket): it sets *srv, runs the tests, stops MinIO and
// exits. A MinIO that cannot start fails the tests, never skips them.
func Main(m *testing.M, srv **Server) {
	s, err := New()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: s3test: %v\n", err)
		os.Exit(1)
	}
	*srv = s
	code := m.Run()
	s.Close()
	os.Exit(code)
}

// New starts a MinIO on 127.0.0.1 (for a TestMain's shared server); Close
// stops it and removes its data.
func New() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "wanda-minio-")
	if err != nil {
		return nil, err
	}
	s := &Server{
		AccessKey: "wanda" + randHex(6),
		SecretKey: randHex(16),
		Region:    Region,
		Dir:       dir,
		exited:    make(chan struct{}),
	}
	s.cmd = exec.Command(bin, "server", "--address", "127.0.0.1:0", filepath.Join(s.Dir, "data"))
	s.cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_REGION="+Region,
		"MINIO_CONFIG_ENV_FILE=", // never a host's
		"HOME="+s.Dir,
	)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	s.cmd.Stdout, s.cmd.Stderr = pw, pw
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting MinIO: %w", err)
	}
	go func() { s.cmd.Wait(); pw.Close(); close(s.exited) }()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := apiLine.FindStringSubmatch(line); m != nil {
				select {
				case port <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	fail := func(err error) (*Server, error) {
		s.Close()
		return nil, fmt.Errorf("%w\nMinIO's output:\n%s", err, s.Logs())
	}
	select {
	case p := <-port:
		s.Host = net.JoinHostPort("127.0.0.1", p)
	case <-s.exited:
		return fail(errors.New("MinIO exited at start"))
	case <-time.After(60 * time.Second):
		return fail(errors.New("MinIO announced no address in 60 s"))
	}
	s.Endpoint = "http://" + s.Host
	if err := s.waitReady(); err != nil {
		return fail(err)
	}
	c, err := minio.New(s.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return fail(err)
	}
	s.Client = c
	return s, nil
}

// Close stops the server (SIGTERM, then SIGKILL after 10 s) and removes
// its data.
func (s *Server) Close() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.Dir)
}

// waitReady polls MinIO's readiness endpoint.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return errors.New("MinIO exited before it was ready")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MinIO not ready in 60 s (last: %v)", err)
		}
	}
}

// Logs returns what the server printed so far.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// Bucket creates a bucket with a fresh name and returns the name.
func (s *Server) Bucket(t testing.TB) string {
	t.Helper()
	name := "b-" + randHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("s3test: creating bucket %s: %v", name, err)
	}
	return name
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

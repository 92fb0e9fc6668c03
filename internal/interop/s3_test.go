package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/adler32"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/s3test"
	"github.com/wanda-fed/wanda/internal/testproc"
)

// s3Env is the test environment without AWS settings, plus the standard
// AWS variables that point at s (the contract of docs/s3.md: nothing else
// is needed).
func s3Env(s *s3test.Server) []string {
	var env []string
	for _, kv := range cleanEnv() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return append(env, s.Env()...)
}

// startS3Server runs `wanda server --export /store=s3://BUCKET/pre` as a
// child process with only the AWS variables set.
func startS3Server(t *testing.T, s *s3test.Server, bucket string) *testproc.Process {
	t.Helper()
	return testproc.StartProcess(t, s3Env(s), "server", "--listen", "127.0.0.1:0",
		"--export", "/store=s3://"+bucket+"/pre", "--log-format", "json")
}

// A wanda server over an S3 bucket (MinIO): curl uploads and reads
// (whole, single and multiple ranges, checksum, delete) and xrdcp reads
// through root://; the objects land in the bucket under the prefix.
func TestS3Export(t *testing.T) {
	requireTool(t, "curl")
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	// An object written by another S3 client before the server starts.
	direct := randomBytes(3<<20+17, 9)
	if _, err := s.Client.PutObject(t.Context(), bucket, "pre/direct/d.bin", strings.NewReader(string(direct)), int64(len(direct)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	p := startS3Server(t, s, bucket)
	dir := t.TempDir()

	// PUT of 20 MiB: a multipart upload of three parts.
	data := randomBytes(20<<20+5, 3)
	src := filepath.Join(dir, "up.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(t, "-T", src, p.URL+"/store/up.bin"); r.Status != 201 && r.Status != 204 {
		t.Fatalf("PUT status %d: %s", r.Status, r.Body)
	}
	oi, err := s.Client.StatObject(t.Context(), bucket, "pre/up.bin", minio.StatObjectOptions{})
	if err != nil || oi.Size != int64(len(data)) {
		t.Fatalf("object in the bucket: %+v, %v", oi, err)
	}
	obj, err := s.Client.GetObject(t.Context(), bucket, "pre/up.bin", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "the object wanda uploaded, read from MinIO", got, data)

	t.Run("GET", func(t *testing.T) {
		r := curl(t, p.URL+"/store/up.bin")
		if r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
		sameBytes(t, "GET", r.Body, data)
		r = curl(t, p.URL+"/store/direct/d.bin")
		sameBytes(t, "GET of an object written directly", r.Body, direct)
	})
	t.Run("ranges", func(t *testing.T) {
		r := curl(t, "-r", "1000-1999", p.URL+"/store/up.bin")
		if r.Status != 206 {
			t.Fatalf("status %d", r.Status)
		}
		sameBytes(t, "range", r.Body, data[1000:2000])
		want := []span{{0, 9}, {9 << 20, 9<<20 + 99}, {20 << 20, 20<<20 + 4}}
		r = curl(t, "-r", "0-9,9437184-9437283,20971520-20971524", p.URL+"/store/up.bin")
		checkMultipart(t, r, data, want)
	})
	t.Run("checksum", func(t *testing.T) {
		want := fmt.Sprintf("adler32=%08x", adler32.Checksum(data))
		if d := curl(t, "-I", "-H", "Want-Digest: adler32", p.URL+"/store/up.bin").Header.Get("Digest"); d != want {
			t.Errorf("Digest %q, want %q", d, want)
		}
	})
	t.Run("listing", func(t *testing.T) {
		r := curl(t, "-X", "PROPFIND", "-H", "Depth: 1", p.URL+"/store/")
		if r.Status != 207 || !strings.Contains(string(r.Body), "up.bin") || !strings.Contains(string(r.Body), "direct") {
			t.Errorf("PROPFIND status %d: %.300s", r.Status, r.Body)
		}
	})
	t.Run("xrdcp", func(t *testing.T) {
		requireTool(t, "xrdcp")
		dst := filepath.Join(dir, "xrd.bin")
		mustRun(t, dir, "xrdcp", "-f", "root://"+p.Addr+"//store/up.bin", dst)
		sameBytes(t, "xrdcp", readFile(t, dst), data)
		// An upload through root:// lands in the bucket.
		mustRun(t, dir, "xrdcp", "-f", src, "root://"+p.Addr+"//store/xrd/up.bin")
		obj, err := s.Client.GetObject(t.Context(), bucket, "pre/xrd/up.bin", minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		got, err := io.ReadAll(obj)
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, "xrdcp upload, read from MinIO", got, data)
	})
	t.Run("metrics", func(t *testing.T) {
		if n := metricSum(t, p.URL, "wanda_s3_requests_total", `export="/store"`, `method="GET"`, `code="206"`); n < 1 {
			t.Errorf("wanda_s3_requests_total of ranged GETs = %v", n)
		}
		r := curl(t, p.URL+"/metrics")
		if strings.Contains(string(r.Body), s.SecretKey) || strings.Contains(p.Log(), s.SecretKey) {
			t.Error("the secret key is in the metrics or the log")
		}
	})
	t.Run("DELETE", func(t *testing.T) {
		if r := curl(t, "-X", "DELETE", p.URL+"/store/direct/d.bin"); r.Status != 204 {
			t.Fatalf("DELETE status %d", r.Status)
		}
		if _, err := s.Client.StatObject(t.Context(), bucket, "pre/direct/d.bin", minio.StatObjectOptions{}); err == nil {
			t.Error("the object is still in the bucket")
		}
		if r := curl(t, "-I", p.URL+"/store/direct/d.bin"); r.Status != 404 {
			t.Errorf("HEAD after DELETE: %d", r.Status)
		}
	})
}

// wandaCmd runs `wanda ARGS...` (this test binary as the command line)
// with env and returns its combined output.
func wandaCmd(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(env, testproc.ChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("$ wanda %s  [%v]\n%s", strings.Join(args, " "), err, out)
	return string(out), err
}

// `wanda cp s3://BUCKET/KEY DEST` and back, ls, stat and rm, with only
// the AWS variables set (the contract of docs/s3.md).
func TestS3ClientCLI(t *testing.T) {
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	env := s3Env(s)
	dir := t.TempDir()
	data := randomBytes(19<<20+7, 11)
	src := filepath.Join(dir, "src.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wandaCmd(t, env, "cp", src, "s3://"+bucket+"/data/f.bin"); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst.bin")
	if _, err := wandaCmd(t, env, "cp", "s3://"+bucket+"/data/f.bin", dst); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "wanda cp from s3://", readFile(t, dst), data)
	if out, err := wandaCmd(t, env, "ls", "s3://"+bucket+"/data/"); err != nil || strings.TrimSpace(out) != "f.bin" {
		t.Errorf("ls = %q, %v", out, err)
	}
	if out, err := wandaCmd(t, env, "stat", "s3://"+bucket+"/data/f.bin"); err != nil || !strings.Contains(out, fmt.Sprint(len(data))) {
		t.Errorf("stat = %q, %v", out, err)
	}
	// The endpoint and region from flags instead of the environment.
	var noEndpoint []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "AWS_ENDPOINT_URL=") && !strings.HasPrefix(kv, "AWS_REGION=") {
			noEndpoint = append(noEndpoint, kv)
		}
	}
	if out, err := wandaCmd(t, noEndpoint, "ls", "--s3-endpoint", s.Endpoint, "--s3-region", s.Region, "--s3-addressing", "path", "s3://"+bucket+"/data/"); err != nil || strings.TrimSpace(out) != "f.bin" {
		t.Errorf("ls with --s3-endpoint = %q, %v", out, err)
	}
	if _, err := wandaCmd(t, env, "rm", "s3://"+bucket+"/data/f.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.StatObject(t.Context(), bucket, "data/f.bin", minio.StatObjectOptions{}); err == nil {
		t.Error("the object is still there after rm")
	}
	if _, err := wandaCmd(t, env, "cp", "s3://"+bucket+"/data/f.bin", dst+"2"); err == nil {
		t.Error("cp of a removed object succeeded")
	}
}

// incompleteUploads lists the keys of the bucket's multipart uploads.
func incompleteUploads(t *testing.T, s *s3test.Server, bucket string) []string {
	t.Helper()
	var keys []string
	for u := range s.Client.ListIncompleteUploads(t.Context(), bucket, "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		keys = append(keys, u.Key)
	}
	return keys
}

// A server killed with SIGKILL in the middle of a PUT to an S3 export
// leaves no object, only a multipart upload, which the restarted server
// aborts once it is older than s3.abandoned_upload_age.
func TestS3UploadKilled(t *testing.T) {
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	cfg := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  exports:
    - prefix: /store
      path: s3://%s/pre
      s3:
        abandoned_upload_age: 3s
log:
  format: json
  level: info
`, bucket)), 0o644); err != nil {
		t.Fatal(err)
	}
	a := testproc.StartProcess(t, s3Env(s), "server", "--config", cfg)
	put := startSlowPut(t, a.URL+"/store/big.bin", 40<<20)
	if _, err := put.w.Write(randomBytes(20<<20, 5)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a multipart upload in the bucket", func() bool { return len(incompleteUploads(t, s, bucket)) == 1 })
	a.Kill(t)
	if _, err := s.Client.StatObject(t.Context(), bucket, "pre/big.bin", minio.StatObjectOptions{}); err == nil {
		t.Fatal("a killed upload left an object")
	}
	b := testproc.StartProcess(t, s3Env(s), "server", "--config", cfg)
	waitFor(t, 30*time.Second, "the abandoned upload swept", func() bool { return len(incompleteUploads(t, s, bucket)) == 0 })
	if r := curl(t, "-I", b.URL+"/store/big.bin"); r.Status != 404 {
		t.Errorf("HEAD of the killed upload: %d", r.Status)
	}
	if !strings.Contains(b.Log(), "abandoned multipart upload") {
		t.Errorf("the sweep logged nothing:\n%s", b.Log())
	}
}

// An object replaced while a client downloads it through wanda: the
// download breaks off after a prefix of the old version, never mixing the
// two. MinIO holds a replacement until the GET streaming the object ends,
// so it lands between two of wanda's GETs (windows of 64 MiB), and the
// next one fails its If-Match. Whether the replacement wins MinIO's lock
// before wanda's next GET is MinIO's timing: every attempt must give a
// prefix of the old version, and one of at most five must break off.
func TestS3ReplacedMidRead(t *testing.T) {
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	v1, v2 := randomBytes(70<<20, 1), randomBytes(70<<20, 2)
	p := startS3Server(t, s, bucket)
	for attempt := 1; attempt <= 5; attempt++ {
		got, err := replaceMidRead(t, s, bucket, p.URL, v1, v2)
		if len(got) > len(v1) || !bytes.Equal(got, v1[:len(got)]) {
			t.Fatalf("attempt %d: the %d bytes received are not the old version's prefix", attempt, len(got))
		}
		t.Logf("attempt %d: %d of %d bytes, then %v", attempt, len(got), len(v1), err)
		if err != nil {
			return
		}
		if len(got) != len(v1) {
			t.Fatalf("attempt %d: a clean end after %d of %d bytes", attempt, len(got), len(v1))
		}
	}
	t.Error("five downloads of a replaced object all ended cleanly: the replacement never reached wanda's next GET")
}

// replaceMidRead puts v1, downloads it through wanda and replaces it with
// v2 in the middle: it returns the bytes received and how the download
// ended (nil for a clean end).
func replaceMidRead(t *testing.T, s *s3test.Server, bucket, url string, v1, v2 []byte) ([]byte, error) {
	t.Helper()
	put := func(data []byte, sent chan<- struct{}) error {
		var r io.Reader = bytes.NewReader(data)
		if sent != nil {
			r = &eofSignal{r: r, sent: sent}
		}
		_, err := s.Client.PutObject(t.Context(), bucket, "pre/f.bin", r, int64(len(data)), minio.PutObjectOptions{})
		return err
	}
	if err := put(v1, nil); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 2 * time.Minute}
	resp, err := hc.Get(url + "/store/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, 1<<20)
	if _, err := io.ReadFull(resp.Body, got); err != nil {
		t.Fatal(err)
	}
	sent, replaced := make(chan struct{}), make(chan error, 1)
	go func() { replaced <- put(v2, sent) }()
	// Read on to 56 MiB; wait there until MinIO has all of the
	// replacement (it only waits for the lock then), and read slowly on
	// until it is in, so that wanda, blocked writing to us after its first
	// 64 MiB window, leaves MinIO's lock to the replacement before it asks
	// for the next one.
	buf := make([]byte, 256<<10)
	waited, done := false, false
	for {
		if !waited && len(got) >= 56<<20 {
			select {
			case <-sent:
			case <-time.After(30 * time.Second):
				t.Fatal("the replacement's upload did not end in 30 s")
			}
			waited = true
		}
		if waited && !done {
			select {
			case perr := <-replaced:
				if perr != nil {
					t.Fatal(perr)
				}
				done = true
			case <-time.After(20 * time.Millisecond):
			}
		}
		n, rerr := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if rerr == io.EOF {
			rerr = nil
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	if !done {
		if perr := <-replaced; perr != nil {
			t.Fatal(perr)
		}
	}
	return got, err
}

// eofSignal closes sent when its reader has given all its bytes.
type eofSignal struct {
	r    io.Reader
	sent chan<- struct{}
	once sync.Once
}

func (e *eofSignal) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.once.Do(func() { close(e.sent) })
	}
	return n, err
}

// An S3 export joins a redirector like any export, and a cache in front
// of the redirector serves its files.
func TestS3Federation(t *testing.T) {
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	data := randomBytes(5<<20+9, 41)
	if _, err := s.Client.PutObject(t.Context(), bucket, "pre/fed/f.bin", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	red := startRole(t, cleanEnv(), "redirector", "--listen", "127.0.0.1:0", "--log-format", "json")
	testproc.StartProcess(t, s3Env(s), "server", "--listen", "127.0.0.1:0",
		"--export", "/store=s3://"+bucket+"/pre", "--join", red.URL, "--log-format", "json")
	waitFor(t, 30*time.Second, "the redirector to locate the S3 export's file", func() bool {
		resp, err := httpClient.Head(red.URL + "/store/fed/f.bin")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	r := curl(t, "-L", red.URL+"/store/fed/f.bin")
	if r.Status != 200 {
		t.Fatalf("GET through the redirector: %d", r.Status)
	}
	sameBytes(t, "through the redirector", r.Body, data)
	cache := startRole(t, cleanEnv(), "cache", "--listen", "127.0.0.1:0", "--upstream", red.URL,
		"--dir", t.TempDir(), "--log-format", "json")
	for range 2 {
		r := curl(t, cache.URL+"/store/fed/f.bin")
		if r.Status != 200 {
			t.Fatalf("GET through the cache: %d", r.Status)
		}
		sameBytes(t, "through the cache", r.Body, data)
	}
}

// startRole runs `wanda ARGS...` (this test binary) for a role whose JSON
// log announces its URL in a "... serving" line (redirector, cache) and
// returns that URL; the test's end stops it.
func startRole(t *testing.T, env []string, args ...string) (p struct{ URL string }) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(env, testproc.ChildEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	urls := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			var rec struct{ Msg, URL string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && strings.HasSuffix(rec.Msg, "serving") && rec.URL != "" {
				select {
				case urls <- rec.URL:
				default:
				}
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	select {
	case p.URL = <-urls:
	case <-done:
		t.Fatalf("wanda %s exited before serving:\n%s", strings.Join(args, " "), logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("wanda %s did not announce its URL in 30 s", strings.Join(args, " "))
	}
	return p
}

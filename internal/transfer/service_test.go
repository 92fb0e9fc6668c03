package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// env is a transfer service on SQLite between two wanda sites.
type env struct {
	st       store.Store
	svc      *transfer.Service
	api      *httptest.Server
	src, dst *testserver.Server
	srcDir   string
	dstDir   string
	cancel   context.CancelFunc
	done     chan error
}

func loopbackTPC(c *config.Config) { c.Server.TPC.Allow = []string{"127.0.0.0/8"} }

func engine() *client.Client {
	c := client.New()
	c.Policy = client.Policy{Attempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Stall: 5 * time.Second}
	xt := xrdclient.New(xrdclient.Options{})
	c.Register("root", xt)
	c.Register("roots", xt)
	return c
}

func startEnv(t *testing.T, tune func(*transfer.Options)) *env {
	t.Helper()
	e := &env{srcDir: t.TempDir(), dstDir: t.TempDir()}
	e.src = testserver.StartWith(t, testserver.Options{Configure: loopbackTPC}, config.Export{Prefix: "/store", Path: e.srcDir})
	e.dst = testserver.StartWith(t, testserver.Options{Configure: loopbackTPC}, config.Export{Prefix: "/store", Path: e.dstDir})
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "transfer.db"))
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	o := transfer.Options{Store: st, Client: engine(), Tick: 20 * time.Millisecond, Lease: 5 * time.Second,
		Optimizer: transfer.OptimizerOptions{Min: 4, Max: 32, Interval: 200 * time.Millisecond}}
	if tune != nil {
		tune(&o)
	}
	if e.svc, err = transfer.New(o); err != nil {
		t.Fatal(err)
	}
	e.api = httptest.NewServer(e.svc.Handler(nil))
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- e.svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-e.done
		e.api.Close()
		st.Close()
	})
	return e
}

func (e *env) put(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(e.srcDir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return e.src.URL + "/store/" + name
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// post sends a raw body to the API.
func (e *env) post(t *testing.T, body []byte) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(e.api.URL+"/api/v1/jobs", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func (e *env) submit(t *testing.T, req transfer.SubmitRequest) string {
	t.Helper()
	b, _ := json.Marshal(req)
	code, m := e.post(t, b)
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("submit: %d %v", code, m)
	}
	return m["job_id"].(string)
}

// wait polls a job until it ends.
func (e *env) wait(t *testing.T, id string, d time.Duration) store.Job {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		j, err := e.st.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State.Final() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %v: %v", id, j.State, d, j.Files)
		}
		time.Sleep(20 * time.Millisecond) // polling the store
	}
}

func (e *env) sameFile(t *testing.T, name string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(e.dstDir, name))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("destination %s: %d bytes (%v), want %d", name, len(got), err, len(want))
	}
}

// A job of files, one with a missing first source: every file arrives
// by third-party copy, the alternative source is used, the attempts are
// recorded; a resubmission with the same id is the same job; sync skips
// what is there.
func TestJobFinishes(t *testing.T) {
	e := startEnv(t, nil)
	var req transfer.SubmitRequest
	datas := map[string][]byte{}
	for i := range 12 {
		name := fmt.Sprintf("d/f%02d", i)
		datas[name] = randomBytes(100<<10+i*7777, uint64(i))
		src := e.put(t, name, datas[name])
		srcs := []string{src}
		if i == 3 {
			srcs = []string{e.src.URL + "/store/missing", src}
		}
		req.Files = append(req.Files, transfer.FileRequest{Sources: srcs, Destinations: []string{e.dst.URL + "/store/" + name}})
	}
	req.Params.ID = "job-1"
	id := e.submit(t, req)
	if id != "job-1" {
		t.Fatalf("job id %q, want the client's", id)
	}
	j := e.wait(t, id, 30*time.Second)
	if j.State != store.JobFinished || j.Files[store.FileFinished] != 12 {
		t.Fatalf("job %s: %v", j.State, j.Files)
	}
	for name, d := range datas {
		e.sameFile(t, name, d)
	}
	fs, err := e.st.Files(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Mode != "pull" || f.Bytes == 0 && f.Index != 3 {
			t.Errorf("file %d: mode %q bytes %d", f.Index, f.Mode, f.Bytes)
		}
	}
	// The same id again: the same job, nothing more queued.
	if again := e.submit(t, req); again != id {
		t.Fatalf("resubmission: %s", again)
	}
	// Sync: the files are there, same size and checksum: skipped.
	req.Params = store.Params{ID: "job-2", Sync: true}
	j2 := e.wait(t, e.submit(t, req), 30*time.Second)
	f2, _ := e.st.Files(context.Background(), j2.ID)
	if j2.State != store.JobFinished || f2[0].Mode != "skipped" {
		t.Fatalf("sync job %s, first file mode %q", j2.State, f2[0].Mode)
	}
	// Without overwrite or sync, the destinations exist: FAILED, not retried.
	req.Params = store.Params{ID: "job-3", Retry: 3}
	j3 := e.wait(t, e.submit(t, req), 30*time.Second)
	f3, _ := e.st.Files(context.Background(), j3.ID)
	if j3.State != store.JobFailed || f3[0].ErrorClass != transfer.ClassExists || f3[0].Attempts != 1 {
		t.Fatalf("job over existing files: %s, %q after %d attempts", j3.State, f3[0].ErrorClass, f3[0].Attempts)
	}
}

// A job whose sources are partly missing ends FINISHEDDIRTY with each
// failed file's reason; retryable failures are retried, missing sources
// are not.
func TestMissingSources(t *testing.T) {
	e := startEnv(t, nil)
	var req transfer.SubmitRequest
	for i := range 1000 {
		name := fmt.Sprintf("m/f%04d", i)
		src := e.src.URL + "/store/" + name
		if i%10 != 0 {
			src = e.put(t, name, []byte(name))
		}
		req.Files = append(req.Files, transfer.FileRequest{Sources: []string{src}, Destinations: []string{e.dst.URL + "/store/" + name}})
	}
	req.Params.Retry = 2
	j := e.wait(t, e.submit(t, req), 2*time.Minute)
	if j.State != store.JobFinishedDirty || j.Files[store.FileFailed] != 100 || j.Files[store.FileFinished] != 900 {
		t.Fatalf("job %s: %v", j.State, j.Files)
	}
	fs, _ := e.st.Files(context.Background(), j.ID)
	for _, f := range fs {
		if f.Index%10 == 0 && (f.ErrorClass != transfer.ClassSourceMissing || f.Attempts != 1 || !strings.Contains(f.Reason, "404")) {
			t.Fatalf("file %d: %s %q (%s) after %d attempts", f.Index, f.State, f.ErrorClass, f.Reason, f.Attempts)
		}
	}
}

// Bad input gets a clear 4xx and queues nothing.
func TestBadSubmissions(t *testing.T) {
	e := startEnv(t, nil)
	ok := `{"sources": ["http://127.0.0.1:1/store/a"], "destinations": ["http://127.0.0.1:2/store/a"]}`
	big := `{"files": [` + strings.Repeat(ok+",", 20<<20/len(ok)) + ok + `]}`
	for _, tc := range []struct {
		name, body string
		code       int
	}{
		{"not JSON", `{"files": [`, 400},
		{"unknown field", `{"files": [` + ok + `], "bogus": 1}`, 400},
		{"unknown file field", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b"], "x": 1}]}`, 400},
		{"two objects", `{"files": [` + ok + `]} {}`, 400},
		{"no files", `{"files": []}`, 400},
		{"20 MB", big, 413},
		{"ftp", `{"files": [{"sources": ["ftp://h/a"], "destinations": ["http://h/b"]}]}`, 400},
		{"file://", `{"files": [{"sources": ["file:///etc/passwd"], "destinations": ["http://h/b"]}]}`, 400},
		{"credentials in URL", `{"files": [{"sources": ["http://u:p@h/a"], "destinations": ["http://h/b"]}]}`, 400},
		{"a token in the query", `{"files": [{"sources": ["http://h/a?authz=Bearer%20x"], "destinations": ["http://h/b"]}]}`, 400},
		{"an access_token", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b?access_token=x"]}]}`, 400},
		{"no host", `{"files": [{"sources": ["http:///a"], "destinations": ["http://h/b"]}]}`, 400},
		{"control characters", `{"files": [{"sources": ["http://h/a\u0000b"], "destinations": ["http://h/b"]}]}`, 400},
		{"two destinations", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b", "http://h/c"]}]}`, 400},
		{"a directory", `{"files": [{"sources": ["http://h/a/"], "destinations": ["http://h/b"]}]}`, 400},
		{"bad checksum", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b"], "checksum": "md6:zz"}]}`, 400},
		{"bad priority", `{"files": [` + ok + `], "params": {"priority": 9}}`, 400},
		{"bad verify", `{"files": [` + ok + `], "params": {"verify_checksum": "maybe"}}`, 400},
		{"bad id", `{"files": [` + ok + `], "params": {"id": "../etc"}}`, 400},
	} {
		code, m := e.post(t, []byte(tc.body))
		if code != tc.code || m["error"] == nil || m["error"] == "" {
			t.Errorf("%s: %d %v, want %d with an error", tc.name, code, m, tc.code)
		}
	}
	jobs, err := e.st.ListJobs(context.Background(), store.JobQuery{})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("%d jobs queued by bad submissions (%v)", len(jobs), err)
	}
	for _, path := range []string{"/api/v1/jobs/nope", "/api/v1/jobs/nope/files"} {
		resp, err := http.Get(e.api.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

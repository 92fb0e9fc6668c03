package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtest"
	"github.com/wanda-fed/wanda/internal/wan"
)

func init() {
	if os.Getenv(killAfterCopyEnv) != "" {
		transfer.SetTestHookMoved(killAfterCopy)
	}
	testproc.RunIfChild()
}

// slowSites are two wanda sites, the source behind a slow link, and
// files on it.
type slowSites struct {
	srcDir, dstDir string
	srcURL, dstURL string // the source through the link
	files          map[string][]byte
}

func startSlowSites(t *testing.T, n, size int, rate int64) *slowSites {
	t.Helper()
	s := &slowSites{srcDir: t.TempDir(), dstDir: t.TempDir(), files: map[string][]byte{}}
	src := testserver.StartWith(t, testserver.Options{Configure: loopbackTPC}, config.Export{Prefix: "/store", Path: s.srcDir})
	dst := testserver.StartWith(t, testserver.Options{Configure: loopbackTPC}, config.Export{Prefix: "/store", Path: s.dstDir})
	cfg := wan.Default()
	cfg.Rate = rate
	rl, addr, err := wan.Start(context.Background(), cfg, "", src.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	s.srcURL, s.dstURL = "http://"+addr, dst.URL
	for i := range n {
		name := fmt.Sprintf("f%02d", i)
		s.files[name] = randomBytes(size, uint64(100+i))
		if err := os.WriteFile(filepath.Join(s.srcDir, name), s.files[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *slowSites) request(id string) transfer.SubmitRequest {
	req := transfer.SubmitRequest{Params: store.Params{ID: id, Retry: 3}}
	for name := range s.files {
		req.Files = append(req.Files, transfer.FileRequest{Sources: []string{s.srcURL + "/store/" + name}, Destinations: []string{s.dstURL + "/store/" + name}})
	}
	return req
}

// consistent fails if the destination holds a file that is not whole.
func (s *slowSites) consistent(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir(s.dstDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		want, ok := s.files[e.Name()]
		got, _ := os.ReadFile(filepath.Join(s.dstDir, e.Name()))
		if ok && bytes.Equal(got, want) {
			n++
			continue
		}
		if e.Name()[0] != '.' { // an upload's hidden temp file is not visible to clients
			t.Fatalf("destination holds %s (%d bytes) that is not a whole source file", e.Name(), len(got))
		}
	}
	return n
}

func apiJob(t *testing.T, base, id string) store.Job {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/jobs/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var j store.Job
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("GET job: %d %s", resp.StatusCode, b)
	}
	return j
}

func apiSubmit(t *testing.T, base string, req transfer.SubmitRequest) string {
	t.Helper()
	b, _ := json.Marshal(req)
	resp, err := http.Post(base+"/api/v1/jobs", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	body, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(body, &m) != nil || m["job_id"] == nil {
		t.Fatalf("submit: %d %s", resp.StatusCode, body)
	}
	return m["job_id"].(string)
}

func waitAPI(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling
	}
}

// kill -9 of the instance mid-job: the restarted instance (same SQLite
// file) takes back the dead one's files once their leases end and
// finishes the job; no partial destination is ever visible.
func TestKillAndRestartSQLite(t *testing.T) {
	s := startSlowSites(t, 8, 2<<20, 40e6) // 16 MiB at 5 MB/s: ~3 s
	db := "sqlite:" + filepath.Join(t.TempDir(), "transfer.db")
	args := []string{"transfer", "serve", "--listen", "127.0.0.1:0", "--db", db, "--log-format", "json",
		"--lease", "1s", "--link-min", "4", "--optimizer-interval", "200ms", "--allow", "127.0.0.0/8"}
	p := testproc.StartProcess(t, nil, args...)
	id := apiSubmit(t, p.URL, s.request("kill-1"))
	waitAPI(t, 20*time.Second, "files in flight", func() bool { return apiJob(t, p.URL, id).Files[store.FileActive] > 0 })
	p.Kill(t)
	before := s.consistent(t)

	p2 := testproc.StartProcess(t, nil, args...)
	var j store.Job
	waitAPI(t, time.Minute, "the job to end after the restart", func() bool { j = apiJob(t, p2.URL, id); return j.State.Final() })
	if j.State != store.JobFinished || j.Files[store.FileFinished] != len(s.files) {
		t.Fatalf("after the restart: %s %v", j.State, j.Files)
	}
	if n := s.consistent(t); n != len(s.files) {
		t.Fatalf("%d whole files at the destination, want %d", n, len(s.files))
	}
	t.Logf("%d files were done at the kill", before)
}

// Cancel mid-transfer: the job is CANCELED, files in flight stop, and
// nothing partial is left at the destination.
func TestCancel(t *testing.T) {
	s := startSlowSites(t, 6, 4<<20, 20e6)
	e := startEnv(t, nil)
	id := e.submit(t, s.request("cancel-1"))
	waitAPI(t, 20*time.Second, "files in flight", func() bool {
		j, _ := e.st.Job(context.Background(), id)
		return j.Files[store.FileActive] > 0
	})
	req, _ := http.NewRequest(http.MethodDelete, e.api.URL+"/api/v1/jobs/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	j := e.wait(t, id, 10*time.Second)
	if j.State != store.JobCanceled {
		t.Fatalf("job %s after a cancel", j.State)
	}
	waitAPI(t, 20*time.Second, "the transfers in flight to stop", func() bool { return e.svc.Active() == 0 })
	s.consistent(t)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("second DELETE: %d, want 409", resp.StatusCode)
	}
}

// Two instances share one PostgreSQL: kill -9 of the one moving files,
// and the other takes them over after their lease and finishes the job;
// no file is moved by both, no partial destination is ever visible.
func TestKillOneOfTwoPostgres(t *testing.T) {
	dsn := pgtest.Start(t)
	s := startSlowSites(t, 8, 2<<20, 40e6)
	args := []string{"transfer", "serve", "--listen", "127.0.0.1:0", "--db", dsn, "--log-format", "json",
		"--lease", "1s", "--link-min", "4", "--optimizer-interval", "200ms", "--allow", "127.0.0.0/8"}
	a := testproc.StartProcess(t, nil, args...)
	b := testproc.StartProcess(t, nil, args...)
	id := apiSubmit(t, a.URL, s.request("pg-kill-1"))
	// Whichever instance claimed files first is killed.
	var victim, survivor *testproc.Process
	waitAPI(t, 20*time.Second, "files in flight", func() bool {
		owner := activeOwner(t, a.URL, id)
		switch {
		case owner == "":
			return false
		case strings.Contains(a.Log(), owner):
			victim, survivor = a, b
		default:
			victim, survivor = b, a
		}
		return true
	})
	victim.Kill(t)
	s.consistent(t)
	var j store.Job
	waitAPI(t, time.Minute, "the job to end on the other instance", func() bool { j = apiJob(t, survivor.URL, id); return j.State.Final() })
	if j.State != store.JobFinished || j.Files[store.FileFinished] != len(s.files) {
		t.Fatalf("after the kill: %s %v", j.State, j.Files)
	}
	if n := s.consistent(t); n != len(s.files) {
		t.Fatalf("%d whole files at the destination, want %d", n, len(s.files))
	}
	// Every attempt of every file: at most one instance at a time (the
	// store's fencing), and the survivor finished what the victim held.
	resp, err := http.Get(survivor.URL + "/api/v1/jobs/" + id + "/files")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var fr transfer.FilesResponse
	if err := json.NewDecoder(resp.Body).Decode(&fr); err != nil {
		t.Fatal(err)
	}
	expired := 0
	for _, at := range fr.Attempts {
		if at.ErrorClass == store.ClassLeaseExpired {
			expired++
		}
	}
	if expired == 0 {
		t.Errorf("no attempt was taken over (lease expired): %+v", fr.Attempts)
	}
}

// activeOwner is the owner of an ACTIVE file of the job, or "".
func activeOwner(t *testing.T, base, id string) string {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/jobs/" + id + "/files")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var fr transfer.FilesResponse
	if err := json.NewDecoder(resp.Body).Decode(&fr); err != nil {
		t.Fatal(err)
	}
	for _, f := range fr.Files {
		if f.State == store.FileActive {
			return f.Owner
		}
	}
	return ""
}

package transfer_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtest"
)

// killAfterCopyEnv, set in a child's environment, makes the child kill
// itself (SIGKILL) as soon as one of its copies has succeeded and before
// the store records it: the worst window of a takeover (init in
// restart_test.go).
const killAfterCopyEnv = "WANDA_TEST_KILL_AFTER_COPY"

func killAfterCopy(_ store.File, a store.Attempt) {
	if a.ErrorClass != "" {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught: the process ends here
}

// serveArgs run one file at a time (so that the kill leaves exactly one
// file copied and not recorded), leases of 1 s.
func serveArgs(db string) []string {
	return []string{"transfer", "serve", "--listen", "127.0.0.1:0", "--db", db, "--log-format", "json",
		"--lease", "1s", "--max-active", "1", "--optimizer-interval", "200ms", "--allow", "127.0.0.0/8"}
}

// killedBeforeRecord submits req to an instance on db that kills itself
// between its first successful copy and the copy's record, waits for its
// end, runs tamper (which may change the destination), then starts a new
// instance on db and returns it and the job's id once the job is final.
func killedBeforeRecord(t *testing.T, s *slowSites, db string, req transfer.SubmitRequest, tamper func(name string)) (*testproc.Process, string) {
	t.Helper()
	a := testproc.StartProcess(t, append(os.Environ(), killAfterCopyEnv+"=1"), serveArgs(db)...)
	id := apiSubmit(t, a.URL, req)
	select {
	case <-a.Done():
	case <-time.After(time.Minute):
		t.Fatal("the instance did not kill itself after its first copy")
	}
	// One whole file at the destination, not recorded: the one copied.
	ents, err := os.ReadDir(s.dstDir)
	if err != nil {
		t.Fatal(err)
	}
	var copied []string
	for _, e := range ents {
		if e.Name()[0] != '.' {
			copied = append(copied, e.Name())
		}
	}
	if s.consistent(t) != 1 || len(copied) != 1 {
		t.Fatalf("after the kill: %v at the destination, want one whole file", copied)
	}
	if tamper != nil {
		tamper(copied[0])
	}
	b := testproc.StartProcess(t, nil, serveArgs(db)...)
	waitAPI(t, time.Minute, "the job to end after the takeover", func() bool { return apiJob(t, b.URL, id).State.Final() })
	return b, id
}

// jobFiles is the job's files and attempts as the API shows them.
func jobFiles(t *testing.T, base, id string) transfer.FilesResponse {
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
	return fr
}

// fileNamed is the job's file whose destination ends in /name.
func fileNamed(t *testing.T, fr transfer.FilesResponse, name string) transfer.FileStatus {
	t.Helper()
	for _, f := range fr.Files {
		if strings.HasSuffix(f.Destination, "/"+name) {
			return f
		}
	}
	t.Fatalf("no file %s in the job", name)
	return transfer.FileStatus{}
}

// The instance is killed between a copy's end and its record; the
// instance restarted on the same SQLite file takes the file back once
// its lease runs out and finds the copy complete: FINISHED, not the
// false "destination exists" failure. A destination changed meanwhile
// (same size, other bytes) is not taken for the copy: FAILED, saying
// so, without overwrite; replaced with it.
func TestKilledBeforeRecordSQLite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overwrite bool
		tamper    bool
		want      store.FileState // of the file copied before the kill
		reason    string
	}{
		{name: "same file", want: store.FileFinished, reason: "found complete at the destination"},
		{name: "changed, no overwrite", tamper: true, want: store.FileFailed, reason: "differs from the source"},
		{name: "changed, overwrite", overwrite: true, tamper: true, want: store.FileFinished},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSlowSites(t, 3, 1<<20, 400e6)
			req := s.request("killed-before-record")
			req.Params.Overwrite = tc.overwrite
			var tamper func(string)
			if tc.tamper {
				tamper = func(name string) {
					other := bytes.Repeat([]byte{'x'}, len(s.files[name]))
					if err := os.WriteFile(filepath.Join(s.dstDir, name), other, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			var copied string
			b, id := killedBeforeRecord(t, s, "sqlite:"+filepath.Join(t.TempDir(), "transfer.db"), req, func(name string) {
				copied = name
				if tamper != nil {
					tamper(name)
				}
			})
			fr := jobFiles(t, b.URL, id)
			for _, f := range fr.Files {
				name := filepath.Base(f.Destination)
				want := store.FileFinished
				if name == copied {
					want = tc.want
				}
				if f.State != want {
					t.Errorf("%s: %s (%s), want %s", name, f.State, f.Reason, want)
				}
				got, _ := os.ReadFile(filepath.Join(s.dstDir, name))
				if want == store.FileFinished && !bytes.Equal(got, s.files[name]) {
					t.Errorf("%s: FINISHED, but the destination does not hold the source's bytes", name)
				}
			}
			f := fileNamed(t, fr, copied)
			if !strings.Contains(f.Reason, tc.reason) || f.Attempts != 2 {
				t.Errorf("the file copied before the kill: %d attempts, reason %q, want 2 and %q", f.Attempts, f.Reason, tc.reason)
			}
			if tc.want == store.FileFailed && !strings.Contains(f.Reason, "forbids replacing it") {
				t.Errorf("reason %q: the destination's own refusal is not said", f.Reason)
			}
		})
	}
}

// An instance on PostgreSQL killed between a copy's end and its record:
// another instance (another owner) takes the file over after the lease and finds
// the copy complete; every file FINISHED with the source's bytes.
func TestKilledBeforeRecordPostgres(t *testing.T) {
	dsn := pgtest.Start(t)
	s := startSlowSites(t, 3, 1<<20, 400e6)
	var copied string
	b, id := killedBeforeRecord(t, s, dsn, s.request("pg-killed-before-record"), func(name string) { copied = name })
	fr := jobFiles(t, b.URL, id)
	for _, f := range fr.Files {
		if f.State != store.FileFinished {
			t.Errorf("%s: %s (%s), want FINISHED", f.Destination, f.State, f.Reason)
		}
	}
	if n := s.consistent(t); n != len(s.files) {
		t.Fatalf("%d whole files at the destination, want %d", n, len(s.files))
	}
	f := fileNamed(t, fr, copied)
	if !strings.Contains(f.Reason, "found complete at the destination") || f.Mode != "found" {
		t.Errorf("the file copied before the kill: mode %q, reason %q", f.Mode, f.Reason)
	}
	expired := false
	for _, at := range fr.Attempts {
		expired = expired || at.Index == f.Index && at.ErrorClass == store.ClassLeaseExpired
	}
	if !expired {
		t.Errorf("the file was not taken over (no expired lease among its attempts): %+v", fr.Attempts)
	}
}

// An instance killed between a copy's end and its record, started again
// on its address, takes its earlier run's file back at once (the same
// host and address: that run is dead), not after the 30 s lease, and
// finds the copy complete.
func TestRestartTakesBack(t *testing.T) {
	s := startSlowSites(t, 3, 1<<20, 400e6)
	db := "sqlite:" + filepath.Join(t.TempDir(), "transfer.db")
	args := func(listen string) []string {
		return []string{"transfer", "serve", "--listen", listen, "--db", db, "--log-format", "json",
			"--lease", "30s", "--max-active", "1", "--optimizer-interval", "200ms", "--allow", "127.0.0.0/8"}
	}
	a := testproc.StartProcess(t, append(os.Environ(), killAfterCopyEnv+"=1"), args("127.0.0.1:0")...)
	id := apiSubmit(t, a.URL, s.request("take-back"))
	select {
	case <-a.Done():
	case <-time.After(time.Minute):
		t.Fatal("the instance did not kill itself after its first copy")
	}
	t0 := time.Now()
	b := testproc.StartProcess(t, nil, args(a.Addr)...) // the same address: the same instance
	waitAPI(t, 20*time.Second, "the job to end before the lease would have run out", func() bool { return apiJob(t, b.URL, id).State.Final() })
	if d := time.Since(t0); d >= 30*time.Second {
		t.Fatalf("the job ended %v after the restart: the lease ran out first", d)
	}
	fr := jobFiles(t, b.URL, id)
	found := 0
	for _, f := range fr.Files {
		if f.State != store.FileFinished {
			t.Errorf("%s: %s (%s)", f.Destination, f.State, f.Reason)
		}
		if f.Mode == "found" {
			found++
		}
	}
	taken := 0
	for _, at := range fr.Attempts {
		if at.ErrorClass == store.ClassLeaseExpired && strings.Contains(at.Message, "taken back when it started again") {
			taken++
		}
	}
	if found != 1 || taken != 1 || s.consistent(t) != len(s.files) {
		t.Errorf("%d files found complete, %d taken back (want 1 and 1): %+v", found, taken, fr.Attempts)
	}
}

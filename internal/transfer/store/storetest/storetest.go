// Package storetest is the conformance suite of store.Store: every
// implementation's test calls Run, so the service can rely on one
// behaviour whichever database is behind it (the storage backends'
// storagetest does the same for storage.Backend). The suite drives a
// store only through the interface and checks what it stored by reading
// it back; times it passes as now are real ones, moved forward by hand
// where a lease or retry delay must run out, so no test waits.
//
// Concurrent is exported on its own so that an implementation shared by
// several processes (postgres) can run it over several stores on one
// database.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Run runs the suite; open returns an empty store for each test (closing
// it is open's business, with t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Submit", testSubmit},
		{"SubmitIdempotent", testSubmitIdempotent},
		{"NotFound", testNotFound},
		{"Times", testTimes},
		{"JobStates", testJobStates},
		{"Cancel", testCancel},
		{"FinishLease", testFinishLease},
		{"FinishAll", testFinishAll},
		{"Expire", testExpire},
		{"TakeBack", testTakeBack},
		{"Fencing", testFencing},
		{"Retry", testRetry},
		{"ClaimPriority", testClaimPriority},
		{"ClaimAge", testClaimAge},
		{"ClaimFairShare", testClaimFairShare},
		{"Links", testLinks},
		{"ListJobs", testListJobs},
		{"Decisions", testDecisions},
		{"EmptyLists", testEmptyLists},
		{"Chaos", testChaos},
		{"Concurrent", func(t *testing.T, s store.Store) { Concurrent(t, s) }},
	}
	for _, tc := range append(tests, ftsTests...) {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// lease is the lease the tests take unless they test leases.
const lease = time.Minute

// spec describes a job to submit.
type spec struct {
	id        string
	submitter string
	link      string
	files     int
	priority  int
}

// submit submits a job of sp.files files on sp.link and returns it.
func submit(t *testing.T, s store.Store, sp spec) store.Job {
	t.Helper()
	if sp.submitter == "" {
		sp.submitter = "alice"
	}
	if sp.link == "" {
		sp.link = "src.example -> dst.example"
	}
	if sp.files == 0 {
		sp.files = 1
	}
	j, created, err := s.Submit(context.Background(), store.Job{
		ID: sp.id, Submitter: sp.submitter, Params: store.Params{Priority: sp.priority, ID: sp.id},
	}, makeFiles(sp.files, sp.link))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if !created {
		t.Fatalf("Submit %q: created false for a new job", sp.id)
	}
	return j
}

// makeFiles returns n files on link.
func makeFiles(n int, link string) []store.File {
	fs := make([]store.File, n)
	for i := range fs {
		fs[i] = store.File{
			Sources:     []string{fmt.Sprintf("https://src.example/f%d", i), fmt.Sprintf("root://alt.example//f%d", i)},
			Destination: fmt.Sprintf("https://dst.example/f%d", i),
			Filesize:    int64(1000 + i),
			Link:        link,
		}
	}
	return fs
}

// later returns once the wall clock has passed after by at least a
// microsecond (the stores' precision), so that the next submission is
// strictly younger. It spins for microseconds; it does not sleep.
func later(after time.Time) {
	for !time.Now().After(after.Add(time.Microsecond)) {
	}
}

// claim claims up to n files of link for owner at now, failing the test
// on an error.
func claim(t *testing.T, s store.Store, owner, link string, n int, now time.Time) []store.File {
	t.Helper()
	fs, err := s.Claim(context.Background(), owner, link, n, now, lease)
	if err != nil {
		t.Fatalf("Claim(%s, %s, %d): %v", owner, link, n, err)
	}
	return fs
}

// finish finishes f for owner with next, failing the test on an error.
func finish(t *testing.T, s store.Store, owner string, f store.File, next store.FileState, class string) {
	t.Helper()
	a := store.Attempt{FileKey: f.FileKey, N: f.Attempts, Source: f.Sources[0], Destination: f.Destination,
		Mode: "stream", Bytes: f.Filesize, ErrorClass: class}
	if class != "" {
		a.Message = "it went wrong: " + class
	}
	if err := s.Finish(context.Background(), owner, a, next, time.Time{}); err != nil {
		t.Fatalf("Finish(%s, %s/%d, %s): %v", owner, f.Job, f.Index, next, err)
	}
}

// job reads a job, failing the test on an error.
func job(t *testing.T, s store.Store, id string) store.Job {
	t.Helper()
	j, err := s.Job(context.Background(), id)
	if err != nil {
		t.Fatalf("Job(%s): %v", id, err)
	}
	return j
}

// files reads a job's files, failing the test on an error.
func files(t *testing.T, s store.Store, id string) []store.File {
	t.Helper()
	fs, err := s.Files(context.Background(), id)
	if err != nil {
		t.Fatalf("Files(%s): %v", id, err)
	}
	return fs
}

// attempts reads a job's attempts, failing the test on an error.
func attempts(t *testing.T, s store.Store, id string) []store.Attempt {
	t.Helper()
	as, err := s.Attempts(context.Background(), id)
	if err != nil {
		t.Fatalf("Attempts(%s): %v", id, err)
	}
	return as
}

// wantState fails the test unless job id is in state want.
func wantState(t *testing.T, s store.Store, id string, want store.JobState) store.Job {
	t.Helper()
	j := job(t, s, id)
	if j.State != want {
		t.Fatalf("job %s: state %s, want %s (files %v)", id, j.State, want, j.Files)
	}
	return j
}

// wantCounts fails the test unless j's file counts are want (states not
// in want: 0).
func wantCounts(t *testing.T, j store.Job, want map[store.FileState]int) {
	t.Helper()
	for _, st := range store.FileStates {
		if got := j.Files[st]; got != want[st] {
			t.Errorf("job %s: %d files %s, want %d (%v)", j.ID, got, st, want[st], j.Files)
		}
	}
}

// wantKeys fails the test unless fs are the files keys, in order.
func wantKeys(t *testing.T, fs []store.File, keys ...store.FileKey) {
	t.Helper()
	got := make([]store.FileKey, len(fs))
	for i, f := range fs {
		got[i] = f.FileKey
	}
	if len(keys) == 0 {
		keys = []store.FileKey{}
	}
	if !reflect.DeepEqual(got, keys) {
		t.Fatalf("claimed %v, want %v", got, keys)
	}
}

// key is a FileKey.
func key(job string, i int) store.FileKey { return store.FileKey{Job: job, Index: i} }

// sameTime fails the test unless got is want to the microsecond, in UTC.
func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if want.IsZero() {
		if !got.IsZero() {
			t.Errorf("%s: %v, want the zero time", what, got)
		}
		return
	}
	if !got.Equal(want.Truncate(time.Microsecond)) || got.Location() != time.UTC {
		t.Errorf("%s: %v, want %v in UTC", what, got, want.UTC().Truncate(time.Microsecond))
	}
}

// sameJSON fails the test unless got and want are the same JSON value.
func sameJSON(t *testing.T, what string, got, want json.RawMessage) {
	t.Helper()
	if len(want) == 0 {
		if len(got) != 0 {
			t.Errorf("%s: %s, want none", what, got)
		}
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("%s: %q: %v", what, got, err)
		return
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: want %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: %s, want %s", what, got, want)
	}
}

// wantErr fails the test unless errors.Is(err, want).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
}

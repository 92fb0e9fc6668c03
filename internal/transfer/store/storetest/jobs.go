package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

func testSubmit(t *testing.T, s store.Store) {
	ctx := context.Background()
	before := time.Now()
	in := []store.File{
		{Sources: []string{"https://a.example/x", "root://b.example//x"}, Destination: "https://c.example/x",
			Checksum: "adler32:0badcafe", Filesize: 1 << 40, Metadata: json.RawMessage(`{"n": 1, "tag": "x"}`), Link: "a.example -> c.example"},
		{Sources: []string{"https://a.example/y"}, Destination: "https://c.example/y", Filesize: -1, Link: "a.example -> c.example"},
		{Sources: []string{"davs://d.example/z"}, Destination: "https://c.example/z", Link: "d.example -> c.example"},
	}
	params := store.Params{VerifyChecksum: "both", Overwrite: true, Retry: 2, RetryDelay: 30, Sync: true,
		JobMetadata: json.RawMessage(`{"campaign": "2030", "list": [1, 2]}`)}
	j, created, err := s.Submit(ctx, store.Job{Submitter: "alice", Params: params}, in)
	after := time.Now()
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if !created || j.ID == "" || j.State != store.JobSubmitted || j.Submitter != "alice" {
		t.Fatalf("Submit: created %v, job %+v", created, j)
	}
	p := j.Params
	if p.VerifyChecksum != "both" || !p.Overwrite || p.Retry != 2 || p.RetryDelay != 30 || !p.Sync || p.Priority != 3 {
		t.Errorf("stored params %+v, want those given with priority 3", p)
	}
	sameJSON(t, "job metadata", p.JobMetadata, params.JobMetadata)
	if j.Created.Before(before.Truncate(time.Microsecond)) || j.Created.After(after) || j.Created.Location() != time.UTC {
		t.Errorf("created %v, want in UTC between %v and %v", j.Created, before, after)
	}
	if !j.Updated.Equal(j.Created) {
		t.Errorf("updated %v, want created %v", j.Updated, j.Created)
	}
	wantCounts(t, j, map[store.FileState]int{store.FileSubmitted: 3})
	got := job(t, s, j.ID)
	if got.ID != j.ID || got.State != j.State || !got.Created.Equal(j.Created) || got.Params.Retry != 2 {
		t.Errorf("Job: %+v, want %+v", got, j)
	}
	wantCounts(t, got, map[store.FileState]int{store.FileSubmitted: 3})

	fs := files(t, s, j.ID)
	if len(fs) != len(in) {
		t.Fatalf("Files: %d files, want %d", len(fs), len(in))
	}
	for i, f := range fs {
		w := in[i]
		if f.Job != j.ID || f.Index != i {
			t.Errorf("file %d: key %+v", i, f.FileKey)
		}
		if len(f.Sources) != len(w.Sources) || f.Sources[0] != w.Sources[0] || f.Sources[len(f.Sources)-1] != w.Sources[len(w.Sources)-1] {
			t.Errorf("file %d: sources %q, want %q", i, f.Sources, w.Sources)
		}
		if f.Destination != w.Destination || f.Checksum != w.Checksum || f.Filesize != w.Filesize || f.Link != w.Link {
			t.Errorf("file %d: %+v, want %+v", i, f, w)
		}
		sameJSON(t, "file metadata", f.Metadata, w.Metadata)
		if f.Priority != 3 || f.Submitter != "alice" || f.State != store.FileSubmitted || f.Attempts != 0 {
			t.Errorf("file %d: priority %d submitter %q state %s attempts %d", i, f.Priority, f.Submitter, f.State, f.Attempts)
		}
		if f.Owner != "" || !f.LeaseUntil.IsZero() || !f.NotBefore.IsZero() || !f.Started.IsZero() || !f.Ended.IsZero() {
			t.Errorf("file %d: fresh file with lease or times: %+v", i, f)
		}
	}
	if as := attempts(t, s, j.ID); len(as) != 0 {
		t.Errorf("Attempts of a fresh job: %+v", as)
	}

	if _, _, err := s.Submit(ctx, store.Job{Submitter: "alice"}, nil); err == nil {
		t.Errorf("Submit without files: no error")
	}
	if js, err := s.ListJobs(ctx, store.JobQuery{}); err != nil || len(js) != 1 {
		t.Errorf("ListJobs after a refused submission: %d jobs, %v; want 1", len(js), err)
	}
}

func testSubmitIdempotent(t *testing.T, s store.Store) {
	ctx := context.Background()
	j1 := submit(t, s, spec{id: "client-id-1", files: 2, priority: 5})
	if j1.ID != "client-id-1" || j1.Params.ID != "client-id-1" {
		t.Fatalf("Submit with an id: stored as %q (params id %q)", j1.ID, j1.Params.ID)
	}
	later(j1.Created)
	j2, created, err := s.Submit(ctx, store.Job{ID: "client-id-1", Submitter: "bob", Params: store.Params{ID: "client-id-1", Retry: 9}},
		makeFiles(5, "other -> link"))
	if err != nil {
		t.Fatalf("resubmission: %v", err)
	}
	if created {
		t.Errorf("resubmission: created true")
	}
	if j2.ID != j1.ID || j2.Submitter != "alice" || j2.Params.Retry != 0 || j2.Params.Priority != 5 || !j2.Created.Equal(j1.Created) {
		t.Errorf("resubmission returned %+v, want the first job %+v", j2, j1)
	}
	wantCounts(t, j2, map[store.FileState]int{store.FileSubmitted: 2})
	if fs := files(t, s, j1.ID); len(fs) != 2 || fs[0].Link != "src.example -> dst.example" {
		t.Errorf("resubmission changed the files: %+v", fs)
	}
	// A resubmission after the job moved on returns it as it is now.
	f := claim(t, s, "w1", "src.example -> dst.example", 1, time.Now())
	wantKeys(t, f, key(j1.ID, 0))
	j3, created, err := s.Submit(ctx, store.Job{ID: "client-id-1", Submitter: "alice"}, makeFiles(1, "x"))
	if err != nil || created || j3.State != store.JobActive {
		t.Errorf("resubmission of an active job: %+v created %v err %v", j3, created, err)
	}
	j4 := submit(t, s, spec{id: "client-id-2"})
	if j4.ID != "client-id-2" {
		t.Errorf("second id: %q", j4.ID)
	}

	// The same id submitted by eight at once: one job, created once.
	var wg sync.WaitGroup
	var createdN atomic.Int32
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			j, created, err := s.Submit(ctx, store.Job{ID: "raced", Submitter: "alice"}, makeFiles(3, "raced link"))
			if created {
				createdN.Add(1)
			}
			if err == nil && (j.ID != "raced" || j.Files[store.FileSubmitted] != 3) {
				err = fmt.Errorf("returned %+v", j)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Submit %d: %v", i, err)
		}
	}
	if n := createdN.Load(); n != 1 {
		t.Errorf("concurrent Submits of one id: %d created, want 1", n)
	}
	if fs := files(t, s, "raced"); len(fs) != 3 {
		t.Errorf("concurrent Submits of one id: %d files, want 3", len(fs))
	}

	// Two cancels at once: one cancels, the other finds the job ended.
	for i := range errs[:2] {
		wg.Go(func() { _, errs[i] = s.Cancel(ctx, "raced", "job canceled") })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs[0], errs[1]), store.ErrFinal) {
		t.Errorf("concurrent Cancels: %v and %v; want one nil, one ErrFinal", errs[0], errs[1])
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	submit(t, s, spec{})
	_, err := s.Job(ctx, "missing")
	wantErr(t, "Job", err, store.ErrNotFound)
	_, err = s.Files(ctx, "missing")
	wantErr(t, "Files", err, store.ErrNotFound)
	_, err = s.Attempts(ctx, "missing")
	wantErr(t, "Attempts", err, store.ErrNotFound)
	_, err = s.Cancel(ctx, "missing", "job canceled")
	wantErr(t, "Cancel", err, store.ErrNotFound)
	lost, err := s.Renew(ctx, "w1", []store.FileKey{key("missing", 0)}, time.Now(), lease)
	if err != nil || len(lost) != 1 {
		t.Errorf("Renew of a missing file: lost %v, err %v; want it lost", lost, err)
	}
	err = s.Finish(ctx, "w1", store.Attempt{FileKey: key("missing", 0)}, store.FileFinished, time.Time{})
	if err == nil {
		t.Errorf("Finish of a missing file: no error")
	}
	if fs := claim(t, s, "w1", "no -> such link", 10, time.Now()); len(fs) != 0 {
		t.Errorf("Claim on an unknown link: %+v", fs)
	}
}

func testTimes(t *testing.T, s store.Store) {
	ctx := context.Background()
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	now := time.Date(2031, 3, 4, 5, 6, 7, 123456789, zone)
	j := submit(t, s, spec{})
	fs := claim(t, s, "w1", "src.example -> dst.example", 1, now)
	if len(fs) != 1 {
		t.Fatalf("Claim: %d files", len(fs))
	}
	sameTime(t, "claimed Started", fs[0].Started, now)
	sameTime(t, "claimed LeaseUntil", fs[0].LeaseUntil, now.Add(lease))
	wantState(t, s, j.ID, store.JobActive)
	stored := files(t, s, j.ID)[0]
	sameTime(t, "stored Started", stored.Started, now)
	sameTime(t, "stored LeaseUntil", stored.LeaseUntil, now.Add(lease))

	start, end := now.Add(987654321*time.Nanosecond), now.Add(3*time.Second+1)
	notBefore := now.Add(90*time.Second + 999)
	a := store.Attempt{FileKey: fs[0].FileKey, N: 1, Start: start, End: end, Source: fs[0].Sources[0],
		Destination: fs[0].Destination, Mode: "tpc-pull", Bytes: 5e6, ErrorClass: "network", Message: "reset"}
	if err := s.Finish(ctx, "w1", a, store.FileSubmitted, notBefore); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	f := files(t, s, j.ID)[0]
	sameTime(t, "NotBefore", f.NotBefore, notBefore)
	sameTime(t, "Started", f.Started, start)
	sameTime(t, "Ended", f.Ended, end)
	if !f.LeaseUntil.IsZero() || f.Owner != "" {
		t.Errorf("retrying file kept its lease: owner %q until %v", f.Owner, f.LeaseUntil)
	}
	as := attempts(t, s, j.ID)
	if len(as) != 1 {
		t.Fatalf("attempts: %+v", as)
	}
	sameTime(t, "attempt Start", as[0].Start, start)
	sameTime(t, "attempt End", as[0].End, end)

	// NotBefore holds to the microsecond.
	if got := claim(t, s, "w1", "src.example -> dst.example", 1, notBefore.Add(-time.Microsecond)); len(got) != 0 {
		t.Errorf("claimed a microsecond before NotBefore")
	}
	if got := claim(t, s, "w1", "src.example -> dst.example", 1, notBefore.Truncate(time.Microsecond)); len(got) != 1 {
		t.Errorf("not claimed at NotBefore")
	}

	d := store.Decision{Link: "l", Time: now, Active: 3, Rate: 1.5, Success: 0.99, Reason: "r"}
	if err := s.Decide(ctx, d); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	ds, err := s.Decisions(ctx, "l", 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Decisions: %v %v", ds, err)
	}
	sameTime(t, "decision Time", ds[0].Time, now)
}

func testJobStates(t *testing.T, s store.Store) {
	now := time.Now()
	cases := []struct {
		name     string
		outcomes []store.FileState
		want     store.JobState
	}{
		{"all finished", []store.FileState{store.FileFinished, store.FileFinished}, store.JobFinished},
		{"some failed", []store.FileState{store.FileFinished, store.FileFailed, store.FileFinished}, store.JobFinishedDirty},
		{"all failed", []store.FileState{store.FileFailed, store.FileFailed}, store.JobFailed},
		{"one file", []store.FileState{store.FileFinished}, store.JobFinished},
	}
	for _, tc := range cases {
		link := "link of " + tc.name
		j := submit(t, s, spec{link: link, files: len(tc.outcomes)})
		for i, next := range tc.outcomes {
			fs := claim(t, s, "w1", link, 1, now)
			wantKeys(t, fs, key(j.ID, i))
			if fs[0].State != store.FileActive || fs[0].Attempts != 1 || fs[0].Owner != "w1" {
				t.Errorf("%s: claimed %+v", tc.name, fs[0])
			}
			wantState(t, s, j.ID, store.JobActive)
			class := ""
			if next == store.FileFailed {
				class = "source missing"
			}
			finish(t, s, "w1", fs[0], next, class)
			if i < len(tc.outcomes)-1 {
				wantState(t, s, j.ID, store.JobActive)
			}
		}
		got := wantState(t, s, j.ID, tc.want)
		want := map[store.FileState]int{}
		for _, o := range tc.outcomes {
			want[o]++
		}
		wantCounts(t, got, want)
		if !got.Updated.After(got.Created) {
			t.Errorf("%s: updated %v not after created %v", tc.name, got.Updated, got.Created)
		}
		c, err := s.Cancel(context.Background(), j.ID, "job canceled")
		wantErr(t, tc.name+": Cancel of an ended job", err, store.ErrFinal)
		if c.State != tc.want {
			t.Errorf("%s: Cancel returned state %s, want %s", tc.name, c.State, tc.want)
		}
		wantState(t, s, j.ID, tc.want)
	}
}

func testCancel(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	link := "src.example -> dst.example"
	j := submit(t, s, spec{link: link, files: 4})
	fs := claim(t, s, "w1", link, 2, now)
	wantKeys(t, fs, key(j.ID, 0), key(j.ID, 1))
	finish(t, s, "w1", fs[1], store.FileFinished, "")

	c, err := s.Cancel(ctx, j.ID, "job canceled")
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if c.State != store.JobCanceled {
		t.Errorf("Cancel returned state %s", c.State)
	}
	wantCounts(t, c, map[store.FileState]int{store.FileFinished: 1, store.FileCanceled: 3})
	for _, f := range files(t, s, j.ID) {
		if f.Index == 1 {
			if f.State != store.FileFinished {
				t.Errorf("the finished file became %s", f.State)
			}
			continue
		}
		if f.State != store.FileCanceled || f.ErrorClass != store.ClassCanceled || f.Owner != "" {
			t.Errorf("file %d after Cancel: state %s class %q owner %q", f.Index, f.State, f.ErrorClass, f.Owner)
		}
	}
	// The owner of the active file learns it lost it.
	lost, err := s.Renew(ctx, "w1", []store.FileKey{key(j.ID, 0)}, now, lease)
	if err != nil || len(lost) != 1 || lost[0] != key(j.ID, 0) {
		t.Errorf("Renew after Cancel: lost %v, err %v", lost, err)
	}
	err = s.Finish(ctx, "w1", store.Attempt{FileKey: fs[0].FileKey, N: 1}, store.FileFinished, time.Time{})
	wantErr(t, "Finish after Cancel", err, store.ErrLeaseLost)
	as := attempts(t, s, j.ID)
	if len(as) != 2 || as[0].Index != 0 || as[0].N != 1 || as[0].ErrorClass != store.ClassCanceled || as[0].Owner != "w1" ||
		as[1].Index != 1 || as[1].ErrorClass != "" {
		t.Errorf("attempts after Cancel: %+v", as)
	}
	if got := claim(t, s, "w2", link, 10, now); len(got) != 0 {
		t.Errorf("claimed files of a canceled job: %+v", got)
	}
	if ls, err := s.Links(ctx, now); err != nil || len(ls) != 0 {
		t.Errorf("Links after Cancel: %+v %v", ls, err)
	}
	_, err = s.Cancel(ctx, j.ID, "job canceled")
	wantErr(t, "second Cancel", err, store.ErrFinal)
	if n, err := s.Expire(ctx, now.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("Expire after Cancel: %d, %v", n, err)
	}

	// A job canceled before any claim.
	j2 := submit(t, s, spec{link: link, files: 2})
	if c, err := s.Cancel(ctx, j2.ID, "job canceled"); err != nil || c.State != store.JobCanceled {
		t.Errorf("Cancel of a submitted job: %+v %v", c, err)
	}
	if as := attempts(t, s, j2.ID); len(as) != 0 {
		t.Errorf("Cancel of a submitted job recorded attempts: %+v", as)
	}
}

package storetest

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

func testFinishLease(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	link := "src.example -> dst.example"
	j := submit(t, s, spec{link: link, files: 2})
	fs := claim(t, s, "w1", link, 1, now)
	wantKeys(t, fs, key(j.ID, 0))
	k := fs[0].FileKey

	err := s.Finish(ctx, "w2", store.Attempt{FileKey: k, N: 1}, store.FileFinished, time.Time{})
	wantErr(t, "Finish by a non-owner", err, store.ErrLeaseLost)
	err = s.Finish(ctx, "w1", store.Attempt{FileKey: k, N: 2}, store.FileFinished, time.Time{})
	wantErr(t, "Finish of another attempt", err, store.ErrLeaseLost)
	if err := s.Finish(ctx, "w1", store.Attempt{FileKey: k, N: 1}, store.FileActive, time.Time{}); err == nil || errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("Finish to ACTIVE: error %v, want a refusal other than ErrLeaseLost", err)
	}
	err = s.Finish(ctx, "w1", store.Attempt{FileKey: key(j.ID, 1), N: 1}, store.FileFinished, time.Time{})
	wantErr(t, "Finish of an unclaimed file", err, store.ErrLeaseLost)
	if as := attempts(t, s, j.ID); len(as) != 0 {
		t.Errorf("refused Finishes recorded attempts: %+v", as)
	}

	lost, err := s.Renew(ctx, "w2", []store.FileKey{k}, now, lease)
	if err != nil || len(lost) != 1 {
		t.Errorf("Renew by a non-owner: lost %v, err %v; want it lost", lost, err)
	}
	lost, err = s.Renew(ctx, "w1", []store.FileKey{k}, now.Add(30*time.Second), lease)
	if err != nil || len(lost) != 0 {
		t.Errorf("Renew by the owner: lost %v, err %v", lost, err)
	}
	sameTime(t, "renewed LeaseUntil", files(t, s, j.ID)[0].LeaseUntil, now.Add(30*time.Second+lease))
	if n, err := s.Expire(ctx, now.Add(lease+time.Second)); err != nil || n != 0 {
		t.Errorf("Expire within a renewed lease: %d, %v", n, err)
	}

	// The lease ran out but nobody took the file back yet: it still holds.
	start := now.Add(time.Second)
	a := store.Attempt{FileKey: k, N: 1, Start: start, End: start.Add(2 * time.Second), Source: fs[0].Sources[1],
		Destination: fs[0].Destination, Mode: "tpc-pull", Bytes: 8e6}
	if err := s.Finish(ctx, "w1", a, store.FileFinished, time.Time{}); err != nil {
		t.Fatalf("Finish by the owner: %v", err)
	}
	f := files(t, s, j.ID)[0]
	if f.State != store.FileFinished || f.Owner != "" || !f.LeaseUntil.IsZero() || f.Bytes != 8e6 || f.Mode != "tpc-pull" || f.ErrorClass != "" {
		t.Errorf("finished file: %+v", f)
	}
	if math.Abs(f.Rate-4) > 1e-9 {
		t.Errorf("rate %v MB/s, want 4", f.Rate)
	}
	sameTime(t, "Started", f.Started, a.Start)
	sameTime(t, "Ended", f.Ended, a.End)
	as := attempts(t, s, j.ID)
	if len(as) != 1 {
		t.Fatalf("attempts: %+v", as)
	}
	g := as[0]
	if g.FileKey != k || g.N != 1 || g.Owner != "w1" || g.Source != a.Source || g.Destination != a.Destination ||
		g.Mode != "tpc-pull" || g.Bytes != 8e6 || g.ErrorClass != "" || g.Message != "" {
		t.Errorf("attempt %+v, want %+v", g, a)
	}
	err = s.Finish(ctx, "w1", a, store.FileFinished, time.Time{})
	wantErr(t, "second Finish", err, store.ErrLeaseLost)
	lost, err = s.Renew(ctx, "w1", []store.FileKey{k}, now, lease)
	if err != nil || len(lost) != 1 {
		t.Errorf("Renew of a finished file: lost %v, err %v", lost, err)
	}

	// Zero times in the attempt: the claim's start, and now.
	fs = claim(t, s, "w1", link, 1, now)
	wantKeys(t, fs, key(j.ID, 1))
	before := time.Now()
	if err := s.Finish(ctx, "w1", store.Attempt{FileKey: fs[0].FileKey}, store.FileFinished, time.Time{}); err != nil {
		t.Fatalf("Finish with N 0 and no times: %v", err)
	}
	as = attempts(t, s, j.ID)
	if len(as) != 2 || as[1].N != 1 || as[1].Owner != "w1" {
		t.Fatalf("attempts: %+v", as)
	}
	sameTime(t, "attempt start from the claim", as[1].Start, now)
	if as[1].End.Before(before.Truncate(time.Microsecond)) {
		t.Errorf("attempt end %v, want about now (%v)", as[1].End, before)
	}
	wantState(t, s, j.ID, store.JobFinished)
}

func testExpire(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	link := "src.example -> dst.example"
	j := submit(t, s, spec{link: link, files: 3})
	fs := claim(t, s, "w1", link, 2, now)
	wantKeys(t, fs, key(j.ID, 0), key(j.ID, 1))
	if n, err := s.Expire(ctx, now.Add(lease)); err != nil || n != 0 {
		t.Errorf("Expire at the lease's end: %d, %v; want 0 (it ends before now)", n, err)
	}
	if _, err := s.Renew(ctx, "w1", []store.FileKey{key(j.ID, 1)}, now.Add(lease/2), lease); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Expire(ctx, now.Add(lease+time.Microsecond)); err != nil || n != 1 {
		t.Fatalf("Expire: %d, %v; want 1", n, err)
	}
	f := files(t, s, j.ID)[0]
	if f.State != store.FileSubmitted || f.Owner != "" || !f.LeaseUntil.IsZero() || !f.NotBefore.IsZero() ||
		f.ErrorClass != store.ClassLeaseExpired || f.Attempts != 1 {
		t.Errorf("expired file: %+v", f)
	}
	if j := wantState(t, s, j.ID, store.JobActive); j.Files[store.FileActive] != 1 || j.Files[store.FileSubmitted] != 2 {
		t.Errorf("counts after Expire: %v", j.Files)
	}
	as := attempts(t, s, j.ID)
	if len(as) != 1 || as[0].FileKey != key(j.ID, 0) || as[0].N != 1 || as[0].Owner != "w1" ||
		as[0].ErrorClass != store.ClassLeaseExpired {
		t.Errorf("attempts after Expire: %+v", as)
	}
	lost, err := s.Renew(ctx, "w1", []store.FileKey{key(j.ID, 0), key(j.ID, 1)}, now.Add(lease), lease)
	if err != nil || len(lost) != 1 || lost[0] != key(j.ID, 0) {
		t.Errorf("Renew after Expire: lost %v, err %v; want file 0", lost, err)
	}
	err = s.Finish(ctx, "w1", store.Attempt{FileKey: key(j.ID, 0), N: 1}, store.FileFinished, time.Time{})
	wantErr(t, "Finish after Expire", err, store.ErrLeaseLost)

	// Claimable at once, by anyone, as a new attempt.
	later := now.Add(lease + time.Second)
	fs = claim(t, s, "w2", link, 1, later)
	wantKeys(t, fs, key(j.ID, 0))
	if fs[0].Attempts != 2 || fs[0].Owner != "w2" {
		t.Errorf("reclaimed file: %+v", fs[0])
	}
	err = s.Finish(ctx, "w1", store.Attempt{FileKey: key(j.ID, 0)}, store.FileFinished, time.Time{})
	wantErr(t, "Finish by the old owner after the file was taken", err, store.ErrLeaseLost)
	finish(t, s, "w2", fs[0], store.FileFinished, "")
	as = attempts(t, s, j.ID)
	if len(as) != 2 || as[1].N != 2 || as[1].Owner != "w2" || as[1].ErrorClass != "" {
		t.Errorf("attempts: %+v", as)
	}
}

func testFencing(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	link := "src.example -> dst.example"
	j := submit(t, s, spec{link: link})
	fs := claim(t, s, "w1", link, 1, now)
	if n, err := s.Expire(ctx, now.Add(2*lease)); err != nil || n != 1 {
		t.Fatalf("Expire: %d %v", n, err)
	}
	again := claim(t, s, "w1", link, 1, now.Add(2*lease))
	wantKeys(t, again, fs[0].FileKey)
	if again[0].Attempts != 2 {
		t.Fatalf("reclaimed attempts %d", again[0].Attempts)
	}
	// The same owner's late Finish of its first claim is stale.
	err := s.Finish(ctx, "w1", store.Attempt{FileKey: fs[0].FileKey, N: fs[0].Attempts}, store.FileFailed, time.Time{})
	wantErr(t, "stale Finish", err, store.ErrLeaseLost)
	finish(t, s, "w1", again[0], store.FileFinished, "")
	wantState(t, s, j.ID, store.JobFinished)
}

func testRetry(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	link := "src.example -> dst.example"
	j := submit(t, s, spec{link: link})
	fs := claim(t, s, "w1", link, 1, now)
	a := store.Attempt{FileKey: fs[0].FileKey, N: 1, Start: now, End: now.Add(time.Second), Source: fs[0].Sources[0],
		Destination: fs[0].Destination, Mode: "stream", Bytes: 10, ErrorClass: "network", Message: "connection reset"}
	retryAt := now.Add(time.Minute)
	if err := s.Finish(ctx, "w1", a, store.FileSubmitted, retryAt); err != nil {
		t.Fatalf("Finish for a retry: %v", err)
	}
	f := files(t, s, j.ID)[0]
	if f.State != store.FileSubmitted || f.ErrorClass != "network" || f.Reason != "connection reset" || f.Owner != "" || f.Attempts != 1 {
		t.Errorf("file waiting for a retry: %+v", f)
	}
	sameTime(t, "NotBefore", f.NotBefore, retryAt)
	wantState(t, s, j.ID, store.JobActive)
	if got := claim(t, s, "w1", link, 1, now.Add(30*time.Second)); len(got) != 0 {
		t.Errorf("claimed before NotBefore: %+v", got)
	}
	fs = claim(t, s, "w2", link, 1, retryAt.Add(time.Second))
	wantKeys(t, fs, key(j.ID, 0))
	if fs[0].Attempts != 2 {
		t.Errorf("second claim: attempts %d", fs[0].Attempts)
	}
	a2 := store.Attempt{FileKey: fs[0].FileKey, N: 2, Start: retryAt, End: retryAt.Add(time.Second), Source: fs[0].Sources[1],
		Destination: fs[0].Destination, Mode: "tpc-pull", ErrorClass: "checksum mismatch", Message: "adler32 differs"}
	if err := s.Finish(ctx, "w2", a2, store.FileFailed, time.Time{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	f = files(t, s, j.ID)[0]
	if f.State != store.FileFailed || f.ErrorClass != "checksum mismatch" || f.Reason != "adler32 differs" || f.Mode != "tpc-pull" || !f.NotBefore.IsZero() {
		t.Errorf("failed file: %+v", f)
	}
	wantState(t, s, j.ID, store.JobFailed)
	as := attempts(t, s, j.ID)
	if len(as) != 2 {
		t.Fatalf("attempts: %+v", as)
	}
	for i, w := range []store.Attempt{a, a2} {
		g := as[i]
		if g.FileKey != w.FileKey || g.N != w.N || g.Source != w.Source || g.Mode != w.Mode || g.ErrorClass != w.ErrorClass ||
			g.Message != w.Message || g.Bytes != w.Bytes {
			t.Errorf("attempt %d: %+v, want %+v", i+1, g, w)
		}
		sameTime(t, "attempt start", g.Start, w.Start)
	}
	if as[0].Owner != "w1" || as[1].Owner != "w2" {
		t.Errorf("attempt owners %q, %q", as[0].Owner, as[1].Owner)
	}
}

// testFinishAll: several endings in one transaction; one refused (not
// the owner's) leaves the others recorded, and the job settles once
// every file is final.
func testFinishAll(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	link := "src.example -> dst.example"
	j := submit(t, s, spec{link: link, files: 4})
	fs := claim(t, s, "w1", link, 3, now)
	wantKeys(t, fs, key(j.ID, 0), key(j.ID, 1), key(j.ID, 2))
	ends := []store.Ending{
		{Attempt: store.Attempt{FileKey: fs[2].FileKey, N: 1, Mode: "pull", Bytes: 10}, Next: store.FileFinished},
		{Attempt: store.Attempt{FileKey: key(j.ID, 3), N: 1}, Next: store.FileFinished}, // never claimed
		{Attempt: store.Attempt{FileKey: fs[0].FileKey, N: 1, ErrorClass: "timeout", Message: "slow"}, Next: store.FileSubmitted, NotBefore: now.Add(time.Hour)},
		{Attempt: store.Attempt{FileKey: fs[1].FileKey, N: 1, ErrorClass: "permission"}, Next: store.FileFailed},
	}
	errs, err := s.FinishAll(ctx, "w1", ends)
	if err != nil {
		t.Fatalf("FinishAll: %v", err)
	}
	if len(errs) != len(ends) {
		t.Fatalf("FinishAll: %d errors for %d endings", len(errs), len(ends))
	}
	for i, e := range errs {
		if i == 1 {
			wantErr(t, "FinishAll of an unclaimed file", e, store.ErrLeaseLost)
		} else if e != nil {
			t.Errorf("FinishAll ending %d: %v", i, e)
		}
	}
	got := files(t, s, j.ID)
	for i, want := range []store.FileState{store.FileSubmitted, store.FileFailed, store.FileFinished, store.FileSubmitted} {
		if got[i].State != want {
			t.Errorf("file %d: state %s, want %s", i, got[i].State, want)
		}
	}
	if as := attempts(t, s, j.ID); len(as) != 3 {
		t.Errorf("FinishAll recorded %d attempts, want 3: %+v", len(as), as)
	}
	if _, err := s.FinishAll(ctx, "w1", []store.Ending{{Attempt: store.Attempt{FileKey: fs[0].FileKey}, Next: store.FileActive}}); err == nil {
		t.Errorf("FinishAll to ACTIVE: no error")
	}
	// The rest, to the end: the job settles.
	fs = claim(t, s, "w1", link, 2, now.Add(2*time.Hour))
	var last []store.Ending
	for _, f := range fs {
		last = append(last, store.Ending{Attempt: store.Attempt{FileKey: f.FileKey, N: f.Attempts}, Next: store.FileFinished})
	}
	if errs, err := s.FinishAll(ctx, "w1", last); err != nil || len(fs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("FinishAll of the rest (%d files): %v %v", len(fs), errs, err)
	}
	wantState(t, s, j.ID, store.JobFinishedDirty)
}

// testTakeBack: an instance started again takes back, at once, the files
// its earlier runs (owners under its prefix) hold, and nobody else's.
func testTakeBack(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	link := "src.example -> dst.example"
	j := submit(t, s, spec{link: link, files: 4})
	claim(t, s, "node/a:1/100", link, 1, now)         // an earlier run of node/a:1
	claim(t, s, "node/a:10/200", link, 1, now)        // another instance, whose name begins alike
	claim(t, s, "node/b:1/300", link, 1, now)         // another instance
	mine := claim(t, s, "node/a:1/400", link, 1, now) // the run that starts
	if n, err := s.TakeBack(ctx, "node/a:1/", "node/a:1/400", now); err != nil || n != 1 {
		t.Fatalf("TakeBack: %d, %v; want 1", n, err)
	}
	fs := files(t, s, j.ID)
	if f := fs[0]; f.State != store.FileSubmitted || f.Owner != "" || f.ErrorClass != store.ClassLeaseExpired ||
		!strings.Contains(f.Reason, "node/a:1/100") {
		t.Errorf("the earlier run's file: %+v", f)
	}
	for _, f := range fs[1:] {
		if f.State != store.FileActive {
			t.Errorf("file %d (%s): %s after TakeBack, want ACTIVE", f.Index, f.Owner, f.State)
		}
	}
	as := attempts(t, s, j.ID)
	if len(as) != 1 || as[0].FileKey != key(j.ID, 0) || as[0].Owner != "node/a:1/100" || as[0].ErrorClass != store.ClassLeaseExpired {
		t.Errorf("attempts after TakeBack: %+v", as)
	}
	err := s.Finish(ctx, "node/a:1/100", store.Attempt{FileKey: key(j.ID, 0), N: 1}, store.FileFinished, time.Time{})
	wantErr(t, "Finish by the earlier run after TakeBack", err, store.ErrLeaseLost)
	if err := s.Finish(ctx, "node/a:1/400", store.Attempt{FileKey: mine[0].FileKey, N: 1}, store.FileFinished, time.Time{}); err != nil {
		t.Errorf("Finish by the run that took back: %v", err)
	}
	if n, err := s.TakeBack(ctx, "node/a:1/", "node/a:1/400", now); err != nil || n != 0 {
		t.Errorf("TakeBack again: %d, %v; want 0", n, err)
	}
}

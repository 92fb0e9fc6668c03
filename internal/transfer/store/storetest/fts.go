package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// ftsTests are the suite's tests of FTS3's job model: hops, alternative
// sources, tokens, bans, deadlines, per-file cancels and priorities.
var ftsTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"Multihop", testMultihop},
	{"Alternatives", testAlternatives},
	{"Tokens", testTokens},
	{"CancelFiles", testCancelFiles},
	{"SetPriority", testSetPriority},
	{"BanWait", testBanWait},
	{"BanCancel", testBanCancel},
	{"Overdue", testOverdue},
	{"SEConfig", testSEConfig},
	{"ListJobsFTS", testListJobsFTS},
	{"Delegation", testDelegation},
}

// hop is a file of one source from host a to host b.
func hop(a, b, name string) store.File {
	return store.File{Sources: []string{"https://" + a + "/" + name}, Destination: "https://" + b + "/" + name, Filesize: -1}
}

// submitFiles submits fs as a job of type typ (with its files' states).
func submitFiles(t *testing.T, s store.Store, typ string, fs ...store.File) store.Job {
	t.Helper()
	j, created, err := s.Submit(context.Background(), store.Job{Submitter: "alice", UserDN: "/CN=alice", VO: "dteam", Type: typ}, fs)
	if err != nil || !created {
		t.Fatalf("Submit: %v (created %v)", err, created)
	}
	return j
}

// end finishes the claimed f with next (class set when failed).
func end(t *testing.T, s store.Store, f store.File, next store.FileState) {
	t.Helper()
	class := ""
	if next == store.FileFailed {
		class = "source missing"
	}
	finish(t, s, "w1", f, next, class)
}

func testMultihop(t *testing.T, s store.Store) {
	now := time.Now()
	h0, h1, h2 := hop("a.example", "b.example", "x"), hop("b.example", "c.example", "x"), hop("c.example", "d.example", "x")
	h1.State, h2.State = store.FileNotUsed, store.FileNotUsed
	j := submitFiles(t, s, store.TypeMultihop, h0, h1, h2)
	if j.Type != store.TypeMultihop || j.Files[store.FileNotUsed] != 2 || j.Files[store.FileSubmitted] != 1 {
		t.Fatalf("submitted %s: %v", j.Type, j.Files)
	}
	if fs := claim(t, s, "w1", "b.example -> c.example", 5, now); len(fs) != 0 {
		t.Fatalf("a NOT_USED hop was claimed: %+v", fs)
	}
	f0 := claim(t, s, "w1", "a.example -> b.example", 5, now)
	wantKeys(t, f0, key(j.ID, 0))
	end(t, s, f0[0], store.FileFinished)
	if fs := files(t, s, j.ID); fs[1].State != store.FileSubmitted || fs[2].State != store.FileNotUsed {
		t.Fatalf("after hop 0: %s %s, want SUBMITTED NOT_USED", fs[1].State, fs[2].State)
	}
	wantState(t, s, j.ID, store.JobActive)
	f1 := claim(t, s, "w1", "b.example -> c.example", 5, now)
	wantKeys(t, f1, key(j.ID, 1))
	end(t, s, f1[0], store.FileFailed)
	// A failed hop ends the job FAILED (not FINISHEDDIRTY); the rest stays NOT_USED.
	got := wantState(t, s, j.ID, store.JobFailed)
	wantCounts(t, got, map[store.FileState]int{store.FileFinished: 1, store.FileFailed: 1, store.FileNotUsed: 1})
	if got.Finished.IsZero() || got.Reason == "" {
		t.Errorf("a failed job: finished %v, reason %q", got.Finished, got.Reason)
	}

	// Every hop finished: FINISHED.
	a, b := hop("a.example", "b.example", "y"), hop("b.example", "c.example", "y")
	b.State = store.FileNotUsed
	j2 := submitFiles(t, s, store.TypeMultihop, a, b)
	for _, l := range []string{"a.example -> b.example", "b.example -> c.example"} {
		fs := claim(t, s, "w1", l, 5, now)
		if len(fs) != 1 || fs[0].Job != j2.ID {
			t.Fatalf("claim on %s: %+v", l, fs)
		}
		end(t, s, fs[0], store.FileFinished)
	}
	if j := wantState(t, s, j2.ID, store.JobFinished); j.Reason != "" {
		t.Errorf("finished job's reason %q", j.Reason)
	}
}

func testAlternatives(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	f := store.File{Sources: []string{"https://a.example/x", "https://b.example/x", "davs://c.example:8443/x"},
		Destination: "https://z.example/x", Filesize: 10, Selection: "orderly"}
	j := submitFiles(t, s, store.TypeReplicas, f)
	fs := files(t, s, j.ID)
	if fs[0].SourceIndex != 0 || fs[0].Link != "a.example -> z.example" || fs[0].SourceSE != "https://a.example" ||
		fs[0].DestSE != "https://z.example" || fs[0].Activity != "default" || fs[0].Selection != "orderly" {
		t.Fatalf("submitted: %+v", fs[0])
	}
	c := claim(t, s, "w1", "a.example -> z.example", 1, now)
	// The first source failed: on to the third (as if the second were refused).
	errs, err := s.FinishAll(ctx, "w1", []store.Ending{{Attempt: store.Attempt{FileKey: c[0].FileKey, N: 1, ErrorClass: "source missing"},
		Next: store.FileSubmitted, Advance: true, To: 2}})
	if err != nil || errs[0] != nil {
		t.Fatalf("FinishAll with a move: %v %v", errs, err)
	}
	fs = files(t, s, j.ID)
	if fs[0].State != store.FileSubmitted || fs[0].SourceIndex != 2 || fs[0].Tried != 1 ||
		fs[0].Link != "c.example:8443 -> z.example" || fs[0].SourceSE != "davs://c.example" {
		t.Fatalf("moved on: %+v", fs[0])
	}
	if nx, ok := fs[0].Next(nil); !ok || nx != 1 {
		t.Errorf("Next after sources 0 and 2: %d %v, want 1", nx, ok)
	}
	c = claim(t, s, "w1", "c.example:8443 -> z.example", 1, now)
	wantKeys(t, c, key(j.ID, 0))
	end(t, s, c[0], store.FileFailed)
	fs = files(t, s, j.ID)
	if fs[0].Tried != 1|4 || fs[0].SourceIndex != 2 {
		t.Fatalf("failed: tried %b source %d, want 101 and 2", fs[0].Tried, fs[0].SourceIndex)
	}
	wantState(t, s, j.ID, store.JobFailed)
	if _, err := s.FinishAll(ctx, "w1", []store.Ending{{Attempt: store.Attempt{FileKey: c[0].FileKey}, Next: store.FileFailed, Advance: true, To: 1}}); err == nil {
		t.Errorf("a move with FAILED: no error")
	}
}

func testTokens(t *testing.T, s store.Store) {
	now := time.Now()
	f := store.File{Sources: []string{"https://a.example/x", "https://b.example/x"}, Destination: "https://z.example/x",
		Filesize: -1, SourceTokens: []string{"tok-a", "tok-b"}, DestToken: "tok-z"}
	g := hop("a.example", "z.example", "plain")
	j := submitFiles(t, s, store.TypeReplicas, f, g)
	for _, r := range files(t, s, j.ID) {
		if r.SourceTokens != nil || r.DestToken != "" {
			t.Fatalf("Files returned tokens: %+v", r)
		}
	}
	c := claim(t, s, "w1", "a.example -> z.example", 5, now)
	wantKeys(t, c, key(j.ID, 0), key(j.ID, 1))
	if !slices.Equal(c[0].SourceTokens, []string{"tok-a", "tok-b"}) || c[0].DestToken != "tok-z" {
		t.Errorf("claimed tokens %q %q", c[0].SourceTokens, c[0].DestToken)
	}
	if c[1].SourceTokens != nil || c[1].DestToken != "" {
		t.Errorf("a file without tokens claimed with %q %q", c[1].SourceTokens, c[1].DestToken)
	}
	b, _ := json.Marshal(c[0])
	if strings.Contains(string(b), "tok-a") || strings.Contains(string(b), "tok-z") {
		t.Errorf("a file's JSON holds its tokens: %s", b)
	}
	// A retry keeps them.
	if err := s.Finish(context.Background(), "w1", store.Attempt{FileKey: c[0].FileKey, N: 1, ErrorClass: "network"}, store.FileSubmitted, time.Time{}); err != nil {
		t.Fatal(err)
	}
	c = claim(t, s, "w1", "a.example -> z.example", 5, now)
	if len(c) != 1 || c[0].DestToken != "tok-z" || len(c[0].SourceTokens) != 2 {
		t.Fatalf("claimed again: %+v", c)
	}
}

func testCancelFiles(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	j := submit(t, s, spec{files: 3})
	c := claim(t, s, "w1", "src.example -> dst.example", 1, now)
	end(t, s, c[0], store.FileFinished)
	states, got, err := s.CancelFiles(ctx, j.ID, []int{1, 0, 7}, "canceled by the user")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(states, []store.FileState{store.FileCanceled, store.FileFinished, ""}) {
		t.Errorf("CancelFiles states %v", states)
	}
	if got.State != store.JobSubmitted && got.State != store.JobActive {
		t.Errorf("job with a file open: %s", got.State)
	}
	states, got, err = s.CancelFiles(ctx, j.ID, []int{2}, "canceled by the user")
	if err != nil || !slices.Equal(states, []store.FileState{store.FileCanceled}) || got.State != store.JobCanceled {
		t.Fatalf("last file canceled: %v, job %s, %v", states, got.State, err)
	}
	if _, _, err := s.CancelFiles(ctx, "missing", []int{0}, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CancelFiles of a missing job: %v", err)
	}
}

func testSetPriority(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	j := submit(t, s, spec{files: 2, priority: 1})
	submit(t, s, spec{files: 1, priority: 3})
	got, err := s.SetPriority(ctx, j.ID, 5)
	if err != nil || got.Params.Priority != 5 {
		t.Fatalf("SetPriority: %v %v", got.Params.Priority, err)
	}
	for _, f := range files(t, s, j.ID) {
		if f.Priority != 5 {
			t.Errorf("file %d priority %d", f.Index, f.Priority)
		}
	}
	// The raised job comes first now.
	c := claim(t, s, "w1", "src.example -> dst.example", 1, now)
	wantKeys(t, c, key(j.ID, 0))
	if _, err := s.Cancel(ctx, j.ID, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPriority(ctx, j.ID, 2); !errors.Is(err, store.ErrFinal) {
		t.Errorf("SetPriority of an ended job: %v", err)
	}
	if _, err := s.SetPriority(ctx, "missing", 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetPriority of a missing job: %v", err)
	}
}

func testBanWait(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	j := submitFiles(t, s, store.TypeRegular, hop("a.example", "z.example", "1"), hop("a.example", "z.example", "2"), hop("b.example", "z.example", "3"))
	c := claim(t, s, "w1", "a.example -> z.example", 1, now)
	affected, err := s.Ban(ctx, store.Ban{SE: "https://a.example", VO: "dteam", Status: store.BanWait, Message: "downtime", AdminDN: "/CN=admin", Added: now})
	if err != nil || !slices.Equal(affected, []string{j.ID}) {
		t.Fatalf("Ban: %v %v", affected, err)
	}
	fs := files(t, s, j.ID)
	if fs[0].State != store.FileActive || fs[1].State != store.FileOnHold || fs[2].State != store.FileSubmitted {
		t.Fatalf("after the ban: %s %s %s", fs[0].State, fs[1].State, fs[2].State)
	}
	if got := claim(t, s, "w1", "a.example -> z.example", 5, now); len(got) != 0 {
		t.Fatalf("a file on hold was claimed")
	}
	// The active one, retried, waits too.
	if err := s.Finish(ctx, "w1", store.Attempt{FileKey: c[0].FileKey, N: 1, ErrorClass: "network"}, store.FileSubmitted, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if fs := files(t, s, j.ID); fs[0].State != store.FileOnHold {
		t.Fatalf("a retry of a banned storage's file: %s", fs[0].State)
	}
	bans, err := s.Bans(ctx)
	if err != nil || len(bans) != 1 || bans[0].SE != "https://a.example" || bans[0].Status != store.BanWait || bans[0].AdminDN != "/CN=admin" {
		t.Fatalf("Bans: %+v %v", bans, err)
	}
	sameTime(t, "ban added", bans[0].Added, now)
	affected, err = s.Unban(ctx, "https://a.example")
	if err != nil || !slices.Equal(affected, []string{j.ID}) {
		t.Fatalf("Unban: %v %v", affected, err)
	}
	if got := claim(t, s, "w1", "a.example -> z.example", 5, now); len(got) != 2 {
		t.Fatalf("after the unban: %d claimed, want 2", len(got))
	}
	if _, err := s.Unban(ctx, "https://a.example"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Unban of a storage not banned: %v", err)
	}
	if bans, _ := s.Bans(ctx); len(bans) != 0 {
		t.Errorf("Bans after the unban: %+v", bans)
	}
}

func testBanCancel(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	// A file at the banned storage, one with another source, one active.
	alt := store.File{Sources: []string{"https://a.example/alt", "https://b.example/alt"}, Destination: "https://z.example/alt", Filesize: -1}
	j := submitFiles(t, s, store.TypeReplicas, hop("a.example", "z.example", "1"), alt, hop("a.example", "z.example", "3"), hop("c.example", "z.example", "4"))
	c := claim(t, s, "w1", "a.example -> z.example", 1, now)
	wantKeys(t, c, key(j.ID, 0))
	affected, err := s.Ban(ctx, store.Ban{SE: "https://a.example", Status: store.BanCancel, Added: now})
	if err != nil || !slices.Equal(affected, []string{j.ID}) {
		t.Fatalf("Ban: %v %v", affected, err)
	}
	fs := files(t, s, j.ID)
	if fs[0].State != store.FileCanceled || fs[2].State != store.FileCanceled || fs[3].State != store.FileSubmitted {
		t.Fatalf("after the ban: %s %s %s", fs[0].State, fs[2].State, fs[3].State)
	}
	if fs[1].State != store.FileSubmitted || fs[1].SourceIndex != 1 || fs[1].Link != "b.example -> z.example" {
		t.Fatalf("the file with another source: %+v", fs[1])
	}
	// The owner of the active one learns it.
	if err := s.Finish(ctx, "w1", store.Attempt{FileKey: c[0].FileKey, N: 1}, store.FileFinished, time.Time{}); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("Finish of a file canceled by a ban: %v", err)
	}
	for _, l := range []string{"b.example -> z.example", "c.example -> z.example"} {
		for _, f := range claim(t, s, "w1", l, 5, now) {
			end(t, s, f, store.FileFinished)
		}
	}
	wantState(t, s, j.ID, store.JobCanceled)
}

func testOverdue(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	j, _, err := s.Submit(ctx, store.Job{Submitter: "alice", Deadline: now.Add(time.Minute)}, makeFiles(3, "src.example -> dst.example"))
	if err != nil {
		t.Fatal(err)
	}
	sameTime(t, "deadline", j.Deadline, now.Add(time.Minute))
	c := claim(t, s, "w1", "src.example -> dst.example", 1, now)
	if n, err := s.Overdue(ctx, now); err != nil || n != 0 {
		t.Fatalf("Overdue before the deadline: %d %v", n, err)
	}
	if n, err := s.Overdue(ctx, now.Add(2*time.Minute)); err != nil || n != 2 {
		t.Fatalf("Overdue after the deadline: %d %v, want 2", n, err)
	}
	// The active file goes on; then the job settles.
	end(t, s, c[0], store.FileFinished)
	got := wantState(t, s, j.ID, store.JobCanceled)
	wantCounts(t, got, map[store.FileState]int{store.FileFinished: 1, store.FileCanceled: 2})

	// A ban with a timeout: files on hold past it are canceled.
	j2 := submitFiles(t, s, store.TypeRegular, hop("q.example", "z.example", "1"))
	if _, err := s.Ban(ctx, store.Ban{SE: "https://q.example", Status: store.BanWait, Added: now, Timeout: 60}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Overdue(ctx, now.Add(30*time.Second)); err != nil || n != 0 {
		t.Fatalf("Overdue within the ban's timeout: %d %v", n, err)
	}
	if n, err := s.Overdue(ctx, now.Add(2*time.Minute)); err != nil || n != 1 {
		t.Fatalf("Overdue past the ban's timeout: %d %v, want 1", n, err)
	}
	wantState(t, s, j2.ID, store.JobCanceled)
}

func testSEConfig(t *testing.T, s store.Store) {
	ctx := context.Background()
	if cs, err := s.SEConfigs(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("SEConfigs of a new store: %v %v", cs, err)
	}
	in := store.SEConfig{SE: "davs://a.example", Info: json.RawMessage(`{"inbound_max_active": 5}`)}
	if err := s.SetSEConfig(ctx, in); err != nil {
		t.Fatal(err)
	}
	in.Info = json.RawMessage(`{"inbound_max_active": 7, "outbound_max_active": 2}`)
	in.Operations = json.RawMessage(`{"dteam": {"delete": 10}}`)
	if err := s.SetSEConfig(ctx, in); err != nil {
		t.Fatal(err)
	}
	cs, err := s.SEConfigs(ctx)
	if err != nil || len(cs) != 1 || cs[0].SE != in.SE {
		t.Fatalf("SEConfigs: %+v %v", cs, err)
	}
	sameJSON(t, "se_info", cs[0].Info, in.Info)
	sameJSON(t, "operations", cs[0].Operations, in.Operations)
	if err := s.DeleteSEConfig(ctx, in.SE); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSEConfig(ctx, in.SE); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteSEConfig twice: %v", err)
	}
}

func testListJobsFTS(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	mk := func(dn, vo string) store.Job {
		j, _, err := s.Submit(ctx, store.Job{Submitter: dn, UserDN: dn, VO: vo, CredID: "dlg-" + vo,
			SourceSE: "https://src.example", DestSE: "https://dst.example"}, makeFiles(1, "src.example -> dst.example"))
		if err != nil {
			t.Fatal(err)
		}
		later(j.Created)
		return j
	}
	a, b, c := mk("/CN=a", "atlas"), mk("/CN=b", "cms"), mk("/CN=a", "atlas")
	if _, err := s.Cancel(ctx, b.ID, "x"); err != nil {
		t.Fatal(err)
	}
	ids := func(q store.JobQuery) []string {
		js, err := s.ListJobs(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	if got := ids(store.JobQuery{Unfinished: true}); !slices.Equal(got, []string{c.ID, a.ID}) {
		t.Errorf("unfinished: %v", got)
	}
	if got := ids(store.JobQuery{Unfinished: true, NoCounts: true}); !slices.Equal(got, []string{c.ID, a.ID}) {
		t.Errorf("unfinished, without counts: %v", got)
	}
	if got := ids(store.JobQuery{Unfinished: true, FinishedAfter: now.Add(-time.Hour)}); !slices.Equal(got, []string{c.ID, b.ID, a.ID}) {
		t.Errorf("unfinished or finished in the last hour: %v", got)
	}
	if got := ids(store.JobQuery{UserDN: "/CN=b"}); !slices.Equal(got, []string{b.ID}) {
		t.Errorf("by DN: %v", got)
	}
	if got := ids(store.JobQuery{VO: "atlas", CredID: "dlg-atlas", SourceSE: "https://src.example", DestSE: "https://dst.example"}); !slices.Equal(got, []string{c.ID, a.ID}) {
		t.Errorf("by VO and storages: %v", got)
	}
	if got := ids(store.JobQuery{SourceSE: "https://other.example"}); len(got) != 0 {
		t.Errorf("by another storage: %v", got)
	}
	j := job(t, s, b.ID)
	if j.UserDN != "/CN=b" || j.VO != "cms" || j.CredID != "dlg-cms" || j.Type != store.TypeRegular || j.Finished.IsZero() || j.Reason != "x" {
		t.Errorf("stored job: %+v", j)
	}
}

// CheckMigratedV1 checks a store opened on a database of schema version
// 1 holding a job "old" (FAILED, one file of sources
// https://A.example:1094/x and root://b.example//x to davs://c.example/x,
// submitted by iss#alice) and a job "open" (one file waiting on link
// "a.example -> c.example"): the migration filled in their type, owner
// and storages, and the waiting file is claimed.
func CheckMigratedV1(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	j := job(t, s, "old")
	if j.Type != store.TypeReplicas || j.UserDN != "iss#alice" || j.Finished.IsZero() || j.SourceSE != "https://a.example" || j.DestSE != "davs://c.example" {
		t.Errorf("migrated job: %+v", j)
	}
	if fs := files(t, s, "old"); fs[0].SourceSE != "https://a.example" || fs[0].DestSE != "davs://c.example" || fs[0].Activity != "default" {
		t.Errorf("migrated file: %+v", fs[0])
	}
	if j := job(t, s, "open"); j.Type != store.TypeRegular || !j.Finished.IsZero() {
		t.Errorf("migrated open job: %+v", j)
	}
	c, err := s.Claim(ctx, "w1", "a.example -> c.example", 5, time.Now(), time.Minute)
	if err != nil || len(c) != 1 || c[0].Job != "open" {
		t.Fatalf("claim after the migration: %+v %v", c, err)
	}
}

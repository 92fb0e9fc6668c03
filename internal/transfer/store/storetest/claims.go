package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

func testClaimPriority(t *testing.T, s store.Store) {
	now := time.Now()
	link := "src.example -> dst.example"
	low := submit(t, s, spec{link: link, files: 2, priority: 1})
	later(low.Created)
	mid := submit(t, s, spec{link: link, files: 1}) // 3
	later(mid.Created)
	high := submit(t, s, spec{link: link, files: 2, priority: 5, submitter: "bob"})
	if high.Params.Priority != 5 || mid.Params.Priority != 3 {
		t.Fatalf("priorities %d, %d", high.Params.Priority, mid.Params.Priority)
	}
	wantKeys(t, claim(t, s, "w1", link, 3, now), key(high.ID, 0), key(high.ID, 1), key(mid.ID, 0))
	// bob now has two active files, alice one: priority still comes first.
	wantKeys(t, claim(t, s, "w1", link, 5, now), key(low.ID, 0), key(low.ID, 1))
}

func testClaimAge(t *testing.T, s store.Store) {
	now := time.Now()
	link := "src.example -> dst.example"
	old := submit(t, s, spec{link: link, files: 2})
	later(old.Created)
	young := submit(t, s, spec{link: link, files: 2})
	if !young.Created.After(old.Created) {
		t.Fatalf("created %v then %v", old.Created, young.Created)
	}
	wantKeys(t, claim(t, s, "w1", link, 3, now), key(old.ID, 0), key(old.ID, 1), key(young.ID, 0))
	wantKeys(t, claim(t, s, "w1", link, 3, now), key(young.ID, 1))
	wantKeys(t, claim(t, s, "w1", link, 3, now))
}

func testClaimFairShare(t *testing.T, s store.Store) {
	now := time.Now()
	link := "src.example -> dst.example"
	var alice, bob, carol store.Job
	for _, p := range []struct {
		j    *store.Job
		name string
	}{{&alice, "alice"}, {&bob, "bob"}, {&carol, "carol"}} {
		*p.j = submit(t, s, spec{link: link, files: 4, submitter: p.name})
		later(p.j.Created)
	}
	// Nobody active: the oldest first, then the one with none active.
	wantKeys(t, claim(t, s, "w1", link, 2, now), key(alice.ID, 0), key(bob.ID, 0))
	wantKeys(t, claim(t, s, "w1", link, 1, now), key(carol.ID, 0))
	// One active each: a claim of six takes two of each, round robin.
	wantKeys(t, claim(t, s, "w1", link, 6, now),
		key(alice.ID, 1), key(bob.ID, 1), key(carol.ID, 1),
		key(alice.ID, 2), key(bob.ID, 2), key(carol.ID, 2))

	// A newcomer catches up with a submitter that holds the link.
	other := "other.example -> dst.example"
	dave := submit(t, s, spec{link: other, files: 5, submitter: "dave"})
	wantKeys(t, claim(t, s, "w1", other, 3, now), key(dave.ID, 0), key(dave.ID, 1), key(dave.ID, 2))
	later(dave.Created)
	erin := submit(t, s, spec{link: other, files: 5, submitter: "erin"})
	wantKeys(t, claim(t, s, "w1", other, 4, now), key(erin.ID, 0), key(erin.ID, 1), key(erin.ID, 2), key(dave.ID, 3))
	// Finished files no longer count: dave's three done, erin holds three.
	for i := range 3 {
		finish(t, s, "w1", store.File{FileKey: key(dave.ID, i), Attempts: 1, Sources: []string{"x"}}, store.FileFinished, "")
	}
	wantKeys(t, claim(t, s, "w1", other, 2, now), key(dave.ID, 4), key(erin.ID, 3))
}

func testLinks(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	a, b := "a.example -> z.example", "b.example -> z.example"
	ja := submit(t, s, spec{link: a, files: 3})
	jb := submit(t, s, spec{link: b, files: 2})
	links := func(at time.Time, want ...store.LinkLoad) {
		t.Helper()
		got, err := s.Links(ctx, at)
		if err != nil {
			t.Fatalf("Links: %v", err)
		}
		if len(want) == 0 {
			want = []store.LinkLoad{}
		}
		if got == nil {
			got = []store.LinkLoad{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Links: %+v, want %+v", got, want)
		}
	}
	links(now, store.LinkLoad{Link: a, Queued: 3}, store.LinkLoad{Link: b, Queued: 2})
	// The storages are those of the files (makeFiles).
	if ses, err := s.LinkStorages(ctx); err != nil || len(ses) != 2 || ses[a] != [2]string{"https://src.example", "https://dst.example"} {
		t.Errorf("LinkStorages: %v %v", ses, err)
	}
	fa := claim(t, s, "w1", a, 1, now)
	fb := claim(t, s, "w1", b, 1, now)
	links(now, store.LinkLoad{Link: a, Queued: 2, Active: 1}, store.LinkLoad{Link: b, Queued: 1, Active: 1})
	// A file waiting for its retry is not queued until its time.
	if err := s.Finish(ctx, "w1", store.Attempt{FileKey: fb[0].FileKey, N: 1, ErrorClass: "timeout"}, store.FileSubmitted, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	links(now, store.LinkLoad{Link: a, Queued: 2, Active: 1}, store.LinkLoad{Link: b, Queued: 1})
	links(now.Add(2*time.Hour), store.LinkLoad{Link: a, Queued: 2, Active: 1}, store.LinkLoad{Link: b, Queued: 2})
	// Final files count nowhere.
	finish(t, s, "w1", fa[0], store.FileFinished, "")
	for _, f := range claim(t, s, "w1", a, 5, now) {
		finish(t, s, "w1", f, store.FileFailed, "permission")
	}
	links(now, store.LinkLoad{Link: b, Queued: 1})
	wantState(t, s, ja.ID, store.JobFinishedDirty)
	if _, err := s.Cancel(ctx, jb.ID, "job canceled"); err != nil {
		t.Fatal(err)
	}
	links(now.Add(2 * time.Hour))
}

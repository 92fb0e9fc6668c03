package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

func testListJobs(t *testing.T, s store.Store) {
	ctx := context.Background()
	list := func(q store.JobQuery) []string {
		t.Helper()
		js, err := s.ListJobs(ctx, q)
		if err != nil {
			t.Fatalf("ListJobs(%+v): %v", q, err)
		}
		ids := []string{}
		for _, j := range js {
			ids = append(ids, j.ID)
			if j.Files == nil {
				t.Errorf("ListJobs: job %s without file counts", j.ID)
			}
		}
		return ids
	}
	want := func(what string, got []string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	if got := list(store.JobQuery{}); len(got) != 0 {
		t.Errorf("ListJobs of an empty store: %v", got)
	}
	var ids []string // oldest first
	var created []time.Time
	for i := range 5 {
		j := submit(t, s, spec{id: fmt.Sprintf("job-%d", i), files: 2, link: fmt.Sprintf("link %d", i)})
		ids = append(ids, j.ID)
		created = append(created, j.Created)
		later(j.Created)
	}
	for _, i := range []int{1, 3} {
		if _, err := s.Cancel(ctx, ids[i], "job canceled"); err != nil {
			t.Fatal(err)
		}
	}
	f := claim(t, s, "w1", "link 4", 1, time.Now())
	finish(t, s, "w1", f[0], store.FileFinished, "")

	want("all", list(store.JobQuery{}), ids[4], ids[3], ids[2], ids[1], ids[0])
	want("canceled", list(store.JobQuery{States: []store.JobState{store.JobCanceled}}), ids[3], ids[1])
	want("submitted or active", list(store.JobQuery{States: []store.JobState{store.JobSubmitted, store.JobActive}}), ids[4], ids[2], ids[0])
	want("finished", list(store.JobQuery{States: []store.JobState{store.JobFinished}}))
	want("limit", list(store.JobQuery{Limit: 2}), ids[4], ids[3])
	want("before", list(store.JobQuery{Before: created[3]}), ids[2], ids[1], ids[0])
	want("before, canceled, limit", list(store.JobQuery{Before: created[4], States: []store.JobState{store.JobCanceled}, Limit: 1}), ids[3])

	// Paging through with Before.
	var paged []string
	q := store.JobQuery{Limit: 2}
	for range 10 {
		js, err := s.ListJobs(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == 0 {
			break
		}
		for _, j := range js {
			paged = append(paged, j.ID)
		}
		q.Before = js[len(js)-1].Created
	}
	want("paged", paged, ids[4], ids[3], ids[2], ids[1], ids[0])

	js, err := s.ListJobs(ctx, store.JobQuery{States: []store.JobState{store.JobActive}})
	if err != nil || len(js) != 1 {
		t.Fatalf("active jobs: %+v %v", js, err)
	}
	wantCounts(t, js[0], map[store.FileState]int{store.FileSubmitted: 1, store.FileFinished: 1})

	// No limit: 100.
	for i := range 100 {
		submit(t, s, spec{id: fmt.Sprintf("more-%03d", i)})
	}
	if got := list(store.JobQuery{}); len(got) != 100 {
		t.Errorf("ListJobs without a limit: %d jobs, want 100", len(got))
	}
	if got := list(store.JobQuery{Limit: 1000}); len(got) != 105 {
		t.Errorf("ListJobs with limit 1000: %d jobs, want 105", len(got))
	}
}

func testDecisions(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Now()
	in := []store.Decision{
		{Link: "l1", Time: t0, Active: 2, Rate: 10.5, Success: 1, Reason: "start"},
		{Link: "l1", Time: t0.Add(time.Second), Active: 3, Rate: 12, Success: 0.99, Reason: "throughput grew"},
		{Link: "l2", Time: t0.Add(2 * time.Second), Active: 2, Rate: 1, Success: 0.5, Reason: "failures"},
		{Link: "l1", Time: t0.Add(3 * time.Second), Active: 2, Rate: 3, Success: 0.9, Reason: "success below 97%"},
	}
	for _, d := range in {
		if err := s.Decide(ctx, d); err != nil {
			t.Fatalf("Decide: %v", err)
		}
	}
	check := func(link string, limit int, want ...store.Decision) {
		t.Helper()
		got, err := s.Decisions(ctx, link, limit)
		if err != nil {
			t.Fatalf("Decisions(%q, %d): %v", link, limit, err)
		}
		if len(got) != len(want) {
			t.Fatalf("Decisions(%q, %d): %+v, want %+v", link, limit, got, want)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Link != w.Link || g.Active != w.Active || g.Rate != w.Rate || g.Success != w.Success || g.Reason != w.Reason {
				t.Errorf("Decisions(%q, %d)[%d]: %+v, want %+v", link, limit, i, g, w)
			}
			sameTime(t, "decision time", g.Time, w.Time)
		}
	}
	check("l1", 10, in[3], in[1], in[0])
	check("l1", 2, in[3], in[1])
	check("l2", 10, in[2])
	check("", 2, in[3], in[2])
	check("", 0, in[3], in[2], in[1], in[0])
	check("none", 5)
}

// Lists are empty, not nil, when there is nothing: they encode as [].
func testEmptyLists(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	check := func(what string, isNil bool, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		} else if isNil {
			t.Errorf("%s: nil, want an empty list", what)
		}
	}
	js, err := s.ListJobs(ctx, store.JobQuery{})
	check("ListJobs", js == nil, err)
	ls, err := s.Links(ctx, now)
	check("Links", ls == nil, err)
	ds, err := s.Decisions(ctx, "", 0)
	check("Decisions", ds == nil, err)
	j := submit(t, s, spec{})
	as, err := s.Attempts(ctx, j.ID)
	check("Attempts", as == nil, err)
	fs, err := s.Claim(ctx, "w1", "no such link", 5, now, lease)
	check("Claim", fs == nil, err)
	fs, err = s.Claim(ctx, "w1", "src.example -> dst.example", 0, now, lease)
	check("Claim of 0", fs == nil, err)
	lost, err := s.Renew(ctx, "w1", nil, now, lease)
	check("Renew of none", lost == nil, err)
	fs = claim(t, s, "w1", "src.example -> dst.example", 1, now)
	lost, err = s.Renew(ctx, "w1", []store.FileKey{fs[0].FileKey}, now, lease)
	check("Renew", lost == nil, err)
}

package transfer_test

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Priorities and fair share, end to end: on a link held to 2 transfers,
// alice's old 20-file job and bob's newer 4-file one are queued, then a
// priority-5 job arrives through the API. The priority-5 files go
// first; then alice and bob take turns, so bob's files do not wait
// behind all of alice's (first come, first served would start them
// 23rd to 26th).
func TestPriorityAndFairShare(t *testing.T) {
	m := metrics.NewTransfer(prometheus.NewRegistry())
	e := startEnv(t, func(o *transfer.Options) {
		o.Tick = time.Hour // the queue is read when a job comes through the API
		o.Optimizer = transfer.OptimizerOptions{Min: 2, Max: 2, Interval: time.Hour}
		o.Metrics = m
	})
	su, _ := url.Parse(e.src.URL)
	du, _ := url.Parse(e.dst.URL)
	link := su.Host + " -> " + du.Host
	files := func(who string, n int) []store.File {
		var fs []store.File
		for i := range n {
			name := fmt.Sprintf("%s/f%02d", who, i)
			fs = append(fs, store.File{Sources: []string{e.put(t, name, randomBytes(64<<10, uint64(i)))},
				Destination: e.dst.URL + "/store/" + name, Link: link})
		}
		return fs
	}
	ctx := context.Background()
	for _, j := range []struct {
		who string
		n   int
	}{{"alice", 20}, {"bob", 4}} {
		if _, _, err := e.st.Submit(ctx, store.Job{ID: j.who, Submitter: j.who, Params: store.Params{ID: j.who}}, files(j.who, j.n)); err != nil {
			t.Fatal(err)
		}
	}
	var req transfer.SubmitRequest
	for _, f := range files("urgent", 2) {
		req.Files = append(req.Files, transfer.FileRequest{Sources: f.Sources, Destinations: []string{f.Destination}})
	}
	req.Params = store.Params{ID: "urgent", Priority: 5}
	e.submit(t, req)

	type start struct {
		job string
		at  time.Time
	}
	var starts []start
	for _, id := range []string{"alice", "bob", "urgent"} {
		if j := e.wait(t, id, time.Minute); j.State != store.JobFinished {
			t.Fatalf("job %s: %s %v", id, j.State, j.Files)
		}
		as, err := e.st.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			starts = append(starts, start{id, a.Start})
		}
	}
	sort.SliceStable(starts, func(i, j int) bool { return starts[i].at.Before(starts[j].at) })
	var order []string
	lastBob := 0
	for i, s := range starts {
		order = append(order, s.job)
		if s.job == "bob" {
			lastBob = i
		}
	}
	if order[0] != "urgent" || order[1] != "urgent" {
		t.Errorf("the priority-5 files did not start first: %v", order)
	}
	// Taking turns puts bob's last file 10th (2 urgent, then a, b, a, b...);
	// a slot freed while the scheduler waits may shift it by a place or two.
	if lastBob > 13 {
		t.Errorf("bob's last file started %d of %d: no fair share: %v", lastBob+1, len(order), order)
	}
	// The metrics saw it: one job through the API, 26 attempts ended well
	// on the link, 26 x 64 KiB pulled, the link's limit 2.
	if got := testutil.ToFloat64(m.Jobs); got != 1 {
		t.Errorf("wanda_transfer_jobs_submitted_total %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Attempts.WithLabelValues(link, "ok")); got != 26 {
		t.Errorf("wanda_transfer_attempts_total{result=ok} %v, want 26", got)
	}
	if got := testutil.ToFloat64(m.Bytes.WithLabelValues(link, "pull")); got != 26*64<<10 {
		t.Errorf("wanda_transfer_bytes_total{mode=pull} %v, want %d", got, 26*64<<10)
	}
	if got := testutil.ToFloat64(m.Limit.WithLabelValues(link)); got != 2 {
		t.Errorf("wanda_transfer_link_limit %v, want 2", got)
	}
}

// A service that starts carries each link on at its latest recorded
// limit, whichever instance decided it, unless that is old: an
// instance started again does not crawl up from --link-min.
func TestOptimizerResumes(t *testing.T) {
	e := startEnv(t, nil) // its store, shared as PostgreSQL's would be
	ctx := context.Background()
	now := time.Now()
	recent, stale := "a.example -> b.example", "c.example -> b.example"
	for _, d := range []store.Decision{
		{Link: recent, Time: now.Add(-time.Minute), Active: 10, Reason: "earlier"},
		{Link: recent, Time: now.Add(-time.Second), Active: 24, Reason: "latest"},
		{Link: stale, Time: now.Add(-time.Hour), Active: 30, Reason: "an hour ago"},
	} {
		if err := e.st.Decide(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := transfer.New(transfer.Options{Store: e.st, Client: engine(), Tick: 20 * time.Millisecond,
		Optimizer: transfer.OptimizerOptions{Min: 4, Max: 32, Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	defer func() { cancel(); <-done }()
	limits := map[string]int{}
	waitAPI(t, 10*time.Second, "the links resumed", func() bool {
		infos, err := svc.Links(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, li := range infos {
			limits[li.Link] = li.Limit
		}
		return limits[recent] != 0
	})
	if limits[recent] != 24 || limits[stale] != 0 {
		t.Errorf("limits after the start: %v, want %s at 24 and %s not resumed", limits, recent, stale)
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// testChaos has workers claim and finish files while, as they go, jobs
// are canceled and every lease is expired under them, so Claim, Finish,
// Cancel and Expire run into each other on the same rows. Workers take
// ErrLeaseLost in their stride, as the service's must. In the end every
// job is final and every claim left exactly one attempt: finished by its
// owner, lost to Expire or stopped by Cancel, never two of these.
func testChaos(t *testing.T, s store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		jobs     = 8
		perJob   = 40
		workers  = 6
		expireAt = 25 // an Expire of every lease each time this many more files are final
		expires  = 10
	)
	links := []string{"a.example -> z.example", "b.example -> z.example"}
	cancelAt := map[int64]int{40: 1, 100: 4, 160: 6} // finals -> job to cancel
	var ids []string
	for j := range jobs {
		fs := makeFiles(perJob, "")
		for i := range fs {
			fs[i].Link = links[(i+j)%len(links)]
		}
		sub, _, err := s.Submit(ctx, store.Job{Submitter: fmt.Sprintf("user%d", j%2)}, fs)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sub.ID)
	}
	var (
		finals   atomic.Int64
		lostN    atomic.Int64
		mu       sync.Mutex
		canceled = map[string]bool{}
	)
	// chaos runs the cancels and expiries due when finals reaches n.
	chaos := func(n int64) error {
		if j, ok := cancelAt[n]; ok {
			_, err := s.Cancel(ctx, ids[j], "job canceled")
			if err != nil && !errors.Is(err, store.ErrFinal) {
				return err
			}
			mu.Lock()
			canceled[ids[j]] = err == nil
			mu.Unlock()
		}
		if n%expireAt == 0 && n/expireAt <= expires {
			if _, err := s.Expire(ctx, time.Now().Add(2*lease)); err != nil {
				return err
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		owner := fmt.Sprintf("worker-%d", w)
		g.Go(func() error {
			for round := 0; ; round++ {
				if err := gctx.Err(); err != nil {
					return err
				}
				fs, err := s.Claim(gctx, owner, links[(w+round)%len(links)], 3, time.Now(), lease)
				if err != nil {
					return err
				}
				if len(fs) == 0 {
					ls, err := s.Links(gctx, time.Now())
					if err != nil {
						return err
					}
					if len(ls) == 0 {
						return nil
					}
					continue
				}
				for _, f := range fs {
					next := store.FileFinished
					switch {
					case f.Index%9 == 0 && f.Attempts == 1:
						next = store.FileSubmitted
					case f.Index%7 == 0:
						next = store.FileFailed
					}
					a := store.Attempt{FileKey: f.FileKey, N: f.Attempts, Source: f.Sources[0], Destination: f.Destination}
					err := s.Finish(gctx, owner, a, next, time.Time{})
					if errors.Is(err, store.ErrLeaseLost) {
						lostN.Add(1)
						continue
					}
					if err != nil {
						return err
					}
					if next.Final() {
						if err := chaos(finals.Add(1)); err != nil {
							return err
						}
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files finished by their owner, %d finishes refused (lease lost)", finals.Load(), lostN.Load())
	if lostN.Load() == 0 {
		t.Errorf("no Finish ever lost its lease: the chaos did not happen")
	}
	for _, id := range ids {
		j := job(t, s, id)
		if !j.State.Final() {
			t.Errorf("job %s ended %s (%v)", id, j.State, j.Files)
		}
		if canceled[id] && j.State != store.JobCanceled {
			t.Errorf("job %s was canceled but is %s", id, j.State)
		}
		as := attempts(t, s, id)
		seen := map[store.FileKey]int{}
		for _, a := range as {
			seen[a.FileKey]++
			if a.N != seen[a.FileKey] {
				t.Errorf("file %s/%d: attempt %d recorded as number %d", id, a.Index, a.N, seen[a.FileKey])
			}
		}
		for _, f := range files(t, s, id) {
			if !f.State.Final() {
				t.Errorf("file %s/%d ended %s", id, f.Index, f.State)
			}
			if seen[f.FileKey] != f.Attempts {
				t.Errorf("file %s/%d: claimed %d times, %d attempts recorded", id, f.Index, f.Attempts, seen[f.FileKey])
			}
		}
	}
}

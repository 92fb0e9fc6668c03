package storetest

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Concurrency test sizes: 2000 files on 4 links, moved by 8 workers.
const (
	concJobs    = 20
	concFiles   = 100 // per job
	concLinks   = 4
	concWorkers = 8
)

// Concurrent has 8 workers claim and finish 2000 files over several
// links, spread round robin over stores (all on one database: one store,
// or several standing for several service instances), and checks that no
// file is ever handed to two claims at once and that every file ends
// final exactly once, with its attempts all recorded. Some first
// attempts are sent back for a retry, so files are claimed again; worker
// 0 also runs Expire as it goes, which must find nothing (the leases are
// long).
func Concurrent(t *testing.T, stores ...store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s0 := stores[0]
	links := make([]string, concLinks)
	for i := range links {
		links[i] = fmt.Sprintf("src%d.example -> dst.example", i)
	}
	var ids []string
	for j := range concJobs {
		fs := make([]store.File, concFiles)
		for i := range fs {
			fs[i] = store.File{Sources: []string{fmt.Sprintf("https://src.example/%d/%d", j, i)},
				Destination: fmt.Sprintf("https://dst.example/%d/%d", j, i), Filesize: int64(i), Link: links[(i+j)%concLinks]}
		}
		sub, _, err := s0.Submit(ctx, store.Job{Submitter: fmt.Sprintf("user%d", j%3), Params: store.Params{Priority: j%5 + 1}}, fs)
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		ids = append(ids, sub.ID)
	}
	const total = concJobs * concFiles

	type claimKey struct {
		store.FileKey
		n int
	}
	var (
		mu      sync.Mutex
		claimed = map[claimKey]string{}   // (file, attempt) -> owner
		claims  = map[store.FileKey]int{} // file -> times claimed
		finals  = map[store.FileKey]store.FileState{}
		done    atomic.Int64
	)
	outcome := func(k store.FileKey, attempt int) store.FileState {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%d", k.Job, k.Index)
		switch v := h.Sum32() % 10; {
		case v == 0 && attempt == 1:
			return store.FileSubmitted // retried at once
		case v == 1:
			return store.FileFailed
		}
		return store.FileFinished
	}
	g, gctx := errgroup.WithContext(ctx)
	for w := range concWorkers {
		s := stores[w%len(stores)]
		owner := fmt.Sprintf("worker-%d", w)
		g.Go(func() error {
			for round := 0; done.Load() < total; round++ {
				if err := gctx.Err(); err != nil {
					return fmt.Errorf("%s: %d of %d files final: %w", owner, done.Load(), total, err)
				}
				if w == 0 {
					if n, err := s.Expire(gctx, time.Now()); err != nil || n != 0 {
						return fmt.Errorf("%s: Expire: %d, %v; want nothing expired", owner, n, err)
					}
				}
				link := links[(w+round)%concLinks]
				fs, err := s.Claim(gctx, owner, link, 1+(w+round)%8, time.Now(), time.Hour)
				if err != nil {
					return fmt.Errorf("%s: %w", owner, err)
				}
				mu.Lock()
				for _, f := range fs {
					ck := claimKey{f.FileKey, f.Attempts}
					if other, dup := claimed[ck]; dup {
						mu.Unlock()
						return fmt.Errorf("file %s/%d attempt %d claimed by %s and %s", f.Job, f.Index, f.Attempts, other, owner)
					}
					claimed[ck] = owner
					claims[f.FileKey]++
					if f.Owner != owner || f.State != store.FileActive || f.Link != link {
						mu.Unlock()
						return fmt.Errorf("%s claimed %+v", owner, f)
					}
				}
				mu.Unlock()
				for _, f := range fs {
					next := outcome(f.FileKey, f.Attempts)
					a := store.Attempt{FileKey: f.FileKey, N: f.Attempts, Source: f.Sources[0], Destination: f.Destination,
						Mode: "stream", Bytes: f.Filesize}
					if next == store.FileFailed {
						a.ErrorClass, a.Message = "permission", "denied"
					}
					if err := s.Finish(gctx, owner, a, next, time.Time{}); err != nil {
						return fmt.Errorf("%s: %w", owner, err)
					}
					if next.Final() {
						mu.Lock()
						if prev, dup := finals[f.FileKey]; dup {
							mu.Unlock()
							return fmt.Errorf("file %s/%d finished twice (%s, %s)", f.Job, f.Index, prev, next)
						}
						finals[f.FileKey] = next
						mu.Unlock()
						done.Add(1)
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	for _, id := range ids {
		j := job(t, s0, id)
		fs := files(t, s0, id)
		as := attempts(t, s0, id)
		nAttempts := 0
		finished := 0
		for _, f := range fs {
			if !f.State.Final() || f.State != finals[f.FileKey] {
				t.Errorf("file %s/%d: state %s, finished as %s", id, f.Index, f.State, finals[f.FileKey])
			}
			if f.State == store.FileFinished {
				finished++
			}
			if f.Attempts != claims[f.FileKey] {
				t.Errorf("file %s/%d: %d attempts, claimed %d times", id, f.Index, f.Attempts, claims[f.FileKey])
			}
			nAttempts += f.Attempts
		}
		if len(as) != nAttempts {
			t.Errorf("job %s: %d attempts recorded, want %d", id, len(as), nAttempts)
		}
		for i, a := range as {
			if i > 0 && as[i-1].Index == a.Index && as[i-1].N+1 != a.N {
				t.Errorf("job %s: attempts out of order: %+v then %+v", id, as[i-1], a)
			}
		}
		want := store.JobFinishedDirty
		switch finished {
		case len(fs):
			want = store.JobFinished
		case 0:
			want = store.JobFailed
		}
		if j.State != want {
			t.Errorf("job %s: state %s, want %s (files %v)", id, j.State, want, j.Files)
		}
	}
	if len(finals) != total {
		t.Errorf("%d files final, want %d", len(finals), total)
	}
	if ls, err := s0.Links(ctx, time.Now()); err != nil || len(ls) != 0 {
		t.Errorf("Links at the end: %+v, %v", ls, err)
	}
}

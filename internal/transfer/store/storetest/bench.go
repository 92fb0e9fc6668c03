package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// BenchClaim measures the scheduler's side of the store: each of the
// stores (one per service instance, sharing one database) claims batch
// files of one link at a time and finishes them in one FinishAll, as
// the service does; a queue of 10,000-file jobs is topped up outside
// the timer. It reports files/s claimed and finished by all of them.
// One op is one claim of batch files by one instance.
func BenchClaim(b *testing.B, stores []store.Store, batch int) {
	ctx := context.Background()
	const link = "src.example -> dst.example"
	const chunk = 10000
	queued := 0
	top := func(need int) {
		for queued < need {
			j := fmt.Sprintf("bench-%d", queued)
			if _, _, err := stores[0].Submit(ctx, store.Job{ID: j, Submitter: "alice", Params: store.Params{ID: j}}, makeFiles(chunk, link)); err != nil {
				b.Fatalf("Submit: %v", err)
			}
			queued += chunk
		}
	}
	top(b.N*batch + chunk)
	var claimed atomic.Int64
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, s := range stores {
		owner := fmt.Sprintf("bench-%d", i)
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				fs, err := s.Claim(ctx, owner, link, batch, time.Now(), time.Minute)
				if err != nil {
					b.Errorf("Claim: %v", err)
					return
				}
				ends := make([]store.Ending, len(fs))
				for k, f := range fs {
					ends[k] = store.Ending{Attempt: store.Attempt{FileKey: f.FileKey, N: f.Attempts, Source: f.Sources[0],
						Destination: f.Destination, Mode: "pull", Bytes: f.Filesize}, Next: store.FileFinished}
				}
				errs, err := s.FinishAll(ctx, owner, ends)
				if err != nil {
					b.Errorf("FinishAll: %v", err)
					return
				}
				for _, e := range errs {
					if e != nil {
						b.Errorf("FinishAll: %v", e)
						return
					}
				}
				claimed.Add(int64(len(fs)))
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(claimed.Load())/b.Elapsed().Seconds(), "files/s")
}

package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
)

// A job's life: submitted, one file claimed under a lease, finished.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	s, err := sqlite.Open(filepath.Join(dir, "transfer.db"))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()

	j, _, _ := s.Submit(ctx, store.Job{ID: "job-1", Submitter: "alice"}, []store.File{{
		Sources:     []string{"https://a.example/data"},
		Destination: "https://b.example/data",
		Link:        "a.example -> b.example",
	}})
	fmt.Println(j.ID, j.State)

	now := time.Now()
	fs, _ := s.Claim(ctx, "instance-1", "a.example -> b.example", 10, now, time.Minute)
	f := fs[0]
	fmt.Println(f.Index, f.State, f.Attempts)
	j, _ = s.Job(ctx, "job-1")
	fmt.Println(j.State)

	_ = s.Finish(ctx, "instance-1", store.Attempt{FileKey: f.FileKey, N: f.Attempts, Start: now, End: now.Add(time.Second),
		Source: f.Sources[0], Destination: f.Destination, Mode: "tpc-pull", Bytes: 1e6}, store.FileFinished, time.Time{})
	j, _ = s.Job(ctx, "job-1")
	fmt.Println(j.State, j.Files[store.FileFinished])
	// Output:
	// job-1 SUBMITTED
	// 0 ACTIVE 1
	// ACTIVE
	// FINISHED 1
}

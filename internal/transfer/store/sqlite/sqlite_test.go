package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
	"github.com/wanda-fed/wanda/internal/transfer/store/storetest"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "transfer.db"))
	})
}

// Two stores on one file (two processes would be the same): the busy
// timeout and BEGIN IMMEDIATE keep them from failing each other.
func TestTwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.db")
	storetest.Concurrent(t, open(t, path), open(t, path))
}

// A restarted instance finds what the last one left.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "transfer.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := s.Submit(ctx, store.Job{ID: "kept", Submitter: "alice"}, []store.File{{Sources: []string{"a"}, Destination: "b", Link: "l"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, path)
	got, err := s2.Job(ctx, "kept")
	if err != nil || !got.Created.Equal(j.Created) || got.Files[store.FileSubmitted] != 1 {
		t.Fatalf("after reopening: %+v, %v", got, err)
	}
}

// A database migrated by a newer wanda is refused, and left alone.
func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.db")
	s := open(t, path)
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO schema_version (version, applied) VALUES (999, 'later')`); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode %q, %v; want wal", mode, err)
	}
	_, err = sqlite.Open(path)
	if err == nil || !strings.Contains(err.Error(), "schema version 999 is newer") {
		t.Fatalf("Open of a newer database: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM schema_version`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("schema_version rows %d, %v; want 4 (three migrations and 999)", n, err)
	}
}

func TestOpenRefusesURIs(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro"} {
		if s, err := sqlite.Open(p); err == nil {
			s.Close()
			t.Errorf("Open(%q): no error", p)
		}
	}
}

// Close ends every goroutine the store started.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "transfer.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.Submit(ctx, store.Job{Submitter: "alice"}, []store.File{{Sources: []string{"a"}, Destination: "b", Link: "l"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "w", "l", 1, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListJobs(ctx, store.JobQuery{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitGoroutines(t, before)
}

// waitGoroutines waits until no more than n goroutines run.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", n, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		<-tick.C
	}
}

// BenchmarkClaim: one instance claiming and finishing files 1 and 16 at
// a time (the service claims what its links may take, when slots free).
func BenchmarkClaim(b *testing.B) {
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s, err := sqlite.Open(filepath.Join(b.TempDir(), "t.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.BenchClaim(b, []store.Store{s}, batch)
		})
	}
}

// Package pgtest starts a throw-away PostgreSQL server for a test
// (pgtemp's): the postgres store's tests and the transfer service's run
// against a real server, as the project's tests do with every peer,
// never against a mock. It is stopped and removed when the test ends.
//
// When PostgreSQL is not installed the test is skipped, unless the CI
// environment variable is set: CI cannot pass by skipping.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtemp"
)

// Start starts a PostgreSQL server for t and returns the DSN of an empty
// database on it ("postgres://wanda:PASSWORD@127.0.0.1:PORT/wanda"). The
// server stops and its files are removed when t ends.
func Start(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtemp.StartTimeout)
	defer cancel()
	dsn, stop, err := pgtemp.Launch(ctx)
	if errors.Is(err, pgtemp.ErrMissing) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return dsn
}

// NewDatabase creates an empty database on the server of dsn (one from
// Start) and returns its DSN: tests that each want a fresh database share
// one server. The database lives as long as the server.
func NewDatabase(t testing.TB, dsn string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgtemp.CreateDatabase(ctx, dsn, fmt.Sprintf("test_%d", dbSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

var dbSeq atomic.Int64

// missing skips t because a prerequisite is missing, or fails it under CI.
func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("PostgreSQL test prerequisite missing in CI: %s", why)
	}
	t.Skipf("skipping: %s (install it to run this test; with CI set this is a failure)", why)
}

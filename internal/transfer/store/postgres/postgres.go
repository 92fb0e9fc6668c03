// Package postgres is the transfer store on PostgreSQL (pgx, pgxpool), for
// several service instances sharing one database.
//
// Several instances means several processes changing the same rows, so
// every operation is one transaction whose row locks are taken in one
// order: a job's files before the job, files by (job, index). Claim and
// Expire lock with SKIP LOCKED, so they never wait on a file someone else
// holds: concurrent claimers get different files, and the one that would
// have waited takes the next instead. Job rows are locked FOR NO KEY
// UPDATE, which does not conflict with the key-share locks that inserting
// an attempt takes through its foreign key. A deadlock or serialization
// failure (which the lock order should rule out) is retried, whole.
//
// Schema migrations run at Open under a transaction-scoped advisory lock,
// so instances starting together migrate once. Times are timestamptz
// (microseconds, read back in UTC); optional ones are NULL when zero.
// Text keys are COLLATE "C": byte order, whatever the database's locale,
// as in the sqlite store.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Store is a store.Store on a PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at dsn (a postgres:// URL or key=value
// string, as libpq's) and brings its schema up to date. A database
// migrated by a newer wanda is refused. Errors never include the DSN's
// password.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors redact the password; say no more than that.
		return nil, errors.New("open postgres store: the DSN does not parse (want postgres://USER:PASSWORD@HOST:PORT/DB or key=value pairs)")
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	s := &Store{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// maxTries bounds the retries of a transaction that failed on a deadlock
// or a serialization failure.
const maxTries = 5

// tx runs fn in a transaction (READ COMMITTED: each statement sees what
// was committed before it began), committing when it returns nil. fn
// may run more than once, so it must start from scratch each time.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for try := 1; ; try++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		var pe *pgconn.PgError
		if try < maxTries && errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01") {
			continue
		}
		return err
	}
}

// utc is t as stored: UTC, to the microsecond.
func utc(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// opt is t as stored in an optional column: NULL when zero.
func opt(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return utc(t)
}

// fromOpt reads an optional time.
func fromOpt(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// execSome runs q in tx; no row changed is store.ErrNotFound.
func execSome(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
	tag, err := tx.Exec(ctx, q, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

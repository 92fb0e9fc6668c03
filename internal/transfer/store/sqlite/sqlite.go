// Package sqlite is the transfer store on an embedded SQLite database
// (modernc.org/sqlite, pure Go: the binary stays static), for one service
// instance on one machine.
//
// SQLite allows one writer at a time. Rather than let goroutines race for
// the database lock and meet SQLITE_BUSY, every write goes through a pool
// of exactly one connection, in BEGIN IMMEDIATE transactions (the write
// lock is taken at BEGIN, so a transaction never has to upgrade a read
// lock and fail halfway); goroutines queue for that connection in Go,
// honouring their contexts. Reads use a separate pool: in WAL mode they
// run beside the writer on a snapshot. A busy timeout covers the rare
// second process on the same file (a backup, the sqlite3 shell).
//
// Times are stored as text, RFC 3339 in UTC to the microsecond with a
// fixed width ("2006-01-02T15:04:05.000000Z"), so they read well in the
// sqlite3 shell and compare correctly as strings; "" is the zero time and
// sorts before every other.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Store is a store.Store on one SQLite database file.
type Store struct {
	w *sql.DB // exactly one connection: every write
	r *sql.DB // readers

	// The writer's statements, prepared once on its connection: parsing
	// SQL costs as much as running most of them. A write transaction
	// notes the ones it had to parse; they are prepared after it ends,
	// when the connection is free again.
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// maxStmts bounds the prepared statements (there are about twenty).
const maxStmts = 64

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for another process's lock.
const busyTimeout = 10 * time.Second

// Open opens (creating it if needed) the database at path and brings its
// schema up to date. A database written by a newer wanda, with migrations
// this one does not know, is refused.
func Open(path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || strings.HasPrefix(path, ":memory:") {
		return nil, fmt.Errorf("open sqlite store %q: want the path of a database file (no '?', '#', file: or :memory:)", path)
	}
	// A new database is the service's alone: it holds the tokens of the
	// jobs waiting (SQLite gives its -wal and -shm files the same mode).
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)") // WAL: durable up to the last checkpoint-safe commit, no fsync per commit
	q.Add("_pragma", "foreign_keys(1)")
	w, err := sql.Open("sqlite", path+"?"+q.Encode()+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(context.Background(), w); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	q.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	return &Store{w: w, r: r, stmts: map[string]*sql.Stmt{}}, nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.mu.Unlock()
	return errors.Join(s.r.Close(), s.w.Close())
}

// write runs fn in a write transaction (BEGIN IMMEDIATE on the one writer
// connection), committing when it returns nil.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	sqlTx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	tx := &wtx{Tx: sqlTx, stmts: s.stmts}
	s.mu.Unlock()
	err = fn(tx)
	if err != nil {
		sqlTx.Rollback()
	} else {
		err = sqlTx.Commit()
	}
	s.prepare(tx.parsed)
	return err
}

// prepare prepares the writer's statements in queries.
func (s *Store) prepare(queries []string) {
	for _, q := range queries {
		st, err := s.w.Prepare(q)
		if err != nil {
			continue // it failed in the transaction too, and was reported there
		}
		s.mu.Lock()
		if _, dup := s.stmts[q]; dup || len(s.stmts) >= maxStmts {
			st.Close()
		} else {
			// Copy on write: transactions running hold the old map.
			m := make(map[string]*sql.Stmt, len(s.stmts)+1)
			for k, v := range s.stmts {
				m[k] = v
			}
			m[q] = st
			s.stmts = m
		}
		s.mu.Unlock()
	}
}

// execSome runs q in tx; no row changed is store.ErrNotFound.
func execSome(ctx context.Context, tx *wtx, q string, args ...any) error {
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// wtx is a write transaction that runs the Store's prepared statements.
type wtx struct {
	*sql.Tx
	stmts  map[string]*sql.Stmt // read only
	parsed []string             // queries not prepared yet
}

func (tx *wtx) stmt(ctx context.Context, query string) *sql.Stmt {
	if st := tx.stmts[query]; st != nil {
		return tx.StmtContext(ctx, st)
	}
	if !slices.Contains(tx.parsed, query) {
		tx.parsed = append(tx.parsed, query)
	}
	return nil
}

// ExecContext is sql.Tx's, on a prepared statement when there is one.
func (tx *wtx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := tx.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.Tx.ExecContext(ctx, query, args...)
}

// QueryContext is sql.Tx's, on a prepared statement when there is one.
func (tx *wtx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := tx.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext is sql.Tx's, on a prepared statement when there is one.
func (tx *wtx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := tx.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.Tx.QueryRowContext(ctx, query, args...)
}

// read runs fn in a read transaction: one snapshot for all its queries.
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}

// tsLayout is the stored form of a time: fixed width, so that string order
// is time order.
const tsLayout = "2006-01-02T15:04:05.000000Z"

// ts is t as stored; the zero time is "".
func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Truncate(time.Microsecond).Format(tsLayout)
}

// parseTS reads a stored time.
func parseTS(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(tsLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t, nil
}

// placeholders is "?, ?, ..." n times.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// querier is a transaction, read or write.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtest"
	"github.com/wanda-fed/wanda/internal/transfer/store/storetest"
)

func open(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	server := pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, pgtest.NewDatabase(t, server))
	})
}

// Two pools on one database stand for two service instances.
func TestTwoInstances(t *testing.T) {
	dsn := pgtest.Start(t)
	storetest.Concurrent(t, open(t, dsn), open(t, dsn))
}

// Instances starting together migrate once, and all start.
func TestConcurrentMigration(t *testing.T) {
	dsn := pgtest.Start(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), dsn)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	conn := connect(t, dsn)
	var rows, max int
	if err := conn.QueryRow(context.Background(), `SELECT count(*), max(version) FROM schema_version`).Scan(&rows, &max); err != nil {
		t.Fatal(err)
	}
	if rows != max || rows == 0 {
		t.Errorf("schema_version: %d rows up to version %d; want each version once", rows, max)
	}
}

// A database migrated by a newer wanda is refused.
func TestNewerSchemaRefused(t *testing.T) {
	dsn := pgtest.Start(t)
	open(t, dsn)
	conn := connect(t, dsn)
	if _, err := conn.Exec(context.Background(), `INSERT INTO schema_version (version) VALUES (999)`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(context.Background(), dsn)
	if err == nil || !strings.Contains(err.Error(), "schema version 999 is newer") {
		t.Fatalf("Open of a newer database: %v", err)
	}
}

// The DSN's password never shows in an error.
func TestPasswordNotInErrors(t *testing.T) {
	dsn := pgtest.Start(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := u.User.Password()
	const wrong = "Wrong-Secret-4711"
	bad := *u
	bad.User = url.UserPassword("wanda", wrong)
	cases := map[string]string{
		"wrong password":      bad.String(),
		"unknown database":    strings.Replace(dsn, "/wanda?", "/nosuchdb?", 1),
		"malformed URL":       "postgres://wanda:" + wrong + "@127.0.0.1:notaport/wanda",
		"malformed key=value": "host=127.0.0.1 password=" + wrong + " port=x'",
	}
	for name, d := range cases {
		s, err := postgres.Open(context.Background(), d)
		if err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", name)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, wrong) || strings.Contains(msg, real) {
			t.Errorf("%s: the password is in the error: %s", name, msg)
		}
	}
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Close ends every goroutine the store started.
func TestNoGoroutineLeak(t *testing.T) {
	dsn := pgtest.Start(t)
	before := runtime.NumGoroutine()
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Submit(ctx, store.Job{Submitter: "alice"}, []store.File{{Sources: []string{"a"}, Destination: "b", Link: "l"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "w", "l", 1, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	s.Close()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		<-tick.C
	}
}

// BenchmarkClaim: one instance, then two sharing the database (the
// issue asks that the pair scale the claim rate), claiming and
// finishing 16 files at a time.
func BenchmarkClaim(b *testing.B) {
	server := pgtest.Start(b)
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			dsn := pgtest.NewDatabase(b, server)
			var ss []store.Store
			for range n {
				s, err := postgres.Open(context.Background(), dsn)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ss = append(ss, s)
			}
			storetest.BenchClaim(b, ss, 16)
		})
	}
}

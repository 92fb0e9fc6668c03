package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtest"
)

// A database of schema version 1 (before FTS3's model) with a finished
// job of alternative sources and a waiting one: opened, it is migrated,
// its storages filled in, and its waiting file is claimed.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t, pgtest.Start(t))
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_version (version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())`,
		migrations[0].sql,
		`INSERT INTO schema_version (version) VALUES (1)`,
		`INSERT INTO jobs VALUES ('old', 'iss#alice', 'FAILED', '{"priority": 3}', '2030-01-01T00:00:00Z', '2030-01-01T00:01:00Z')`,
		`INSERT INTO files (job_id, idx, sources, destination, checksum, filesize, link, priority, submitter, submitted, state)
			VALUES ('old', 0, '{"https://A.example:1094/x", "root://b.example//x"}', 'davs://c.example/x', '', 1, 'a.example:1094 -> c.example', 3, 'iss#alice', '2030-01-01T00:00:00Z', 'FAILED')`,
		`INSERT INTO jobs VALUES ('open', 'iss#bob', 'SUBMITTED', '{"priority": 3}', '2030-01-01T00:00:00Z', '2030-01-01T00:00:00Z')`,
		`INSERT INTO files (job_id, idx, sources, destination, checksum, filesize, link, priority, submitter, submitted, state)
			VALUES ('open', 0, '{"https://a.example/y"}', 'https://c.example/y', '', 1, 'a.example -> c.example', 3, 'iss#bob', '2030-01-01T00:00:00Z', 'SUBMITTED')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	conn.Close(ctx)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := s.Job(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if j.Type != store.TypeReplicas || j.UserDN != "iss#alice" || j.Finished.IsZero() || j.SourceSE != "https://a.example" || j.DestSE != "davs://c.example" {
		t.Errorf("migrated job: %+v", j)
	}
	fs, err := s.Files(ctx, "old")
	if err != nil || fs[0].SourceSE != "https://a.example" || fs[0].DestSE != "davs://c.example" || fs[0].Activity != "default" {
		t.Fatalf("migrated file: %+v %v", fs, err)
	}
	if j, _ := s.Job(ctx, "open"); j.Type != store.TypeRegular || !j.Finished.IsZero() {
		t.Errorf("migrated open job: %+v", j)
	}
	c, err := s.Claim(ctx, "w1", "a.example -> c.example", 5, time.Now(), time.Minute)
	if err != nil || len(c) != 1 || c[0].Job != "open" {
		t.Fatalf("claim after the migration: %+v %v", c, err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT max(version) FROM schema_version`).Scan(&n); err != nil || n != len(migrations) {
		t.Errorf("schema version %d, %v", n, err)
	}
}

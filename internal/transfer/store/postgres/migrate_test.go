package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtest"
	"github.com/wanda-fed/wanda/internal/transfer/store/storetest"
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
	storetest.CheckMigratedV1(t, s)
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT max(version) FROM schema_version`).Scan(&n); err != nil || n != len(migrations) {
		t.Errorf("schema version %d, %v", n, err)
	}
}

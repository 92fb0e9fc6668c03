package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/storetest"
)

// A database of schema version 1 (before FTS3's model) with a finished
// job of alternative sources and a waiting one: opened, it is migrated,
// its storages filled in, and its waiting file is claimed.
func TestMigrateFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL PRIMARY KEY, applied TEXT NOT NULL)`,
		migrations[0].sql,
		`INSERT INTO schema_version VALUES (1, 'then')`,
		`INSERT INTO jobs VALUES ('old', 'iss#alice', 'FAILED', '{"priority": 3}', '2030-01-01T00:00:00.000000Z', '2030-01-01T00:01:00.000000Z')`,
		`INSERT INTO files (job_id, idx, sources, destination, checksum, filesize, link, priority, submitter, submitted, state)
			VALUES ('old', 0, '["https://A.example:1094/x", "root://b.example//x"]', 'davs://c.example/x', '', 1, 'a.example:1094 -> c.example', 3, 'iss#alice', '2030-01-01T00:00:00.000000Z', 'FAILED')`,
		`INSERT INTO jobs VALUES ('open', 'iss#bob', 'SUBMITTED', '{"priority": 3}', '2030-01-01T00:00:00.000000Z', '2030-01-01T00:00:00.000000Z')`,
		`INSERT INTO files (job_id, idx, sources, destination, checksum, filesize, link, priority, submitter, submitted, state)
			VALUES ('open', 0, '["https://a.example/y"]', 'https://c.example/y', '', 1, 'a.example -> c.example', 3, 'iss#bob', '2030-01-01T00:00:00.000000Z', 'SUBMITTED')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckMigratedV1(t, s)
	var n int
	if err := s.r.QueryRow(`SELECT max(version) FROM schema_version`).Scan(&n); err != nil || n != len(migrations) {
		t.Errorf("schema version %d, %v", n, err)
	}
}

// A file's tokens are gone from the database once it has ended; a new
// database is readable by its owner alone.
func TestTokensClearedAtTheEnd(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a new database's mode: %v %v, want 0600", fi.Mode(), err)
	}
	j, _, err := s.Submit(ctx, store.Job{Submitter: "a"}, []store.File{{Sources: []string{"https://a/x"}, Destination: "https://b/x",
		SourceTokens: []string{"secret-src"}, DestToken: "secret-dst"}})
	if err != nil {
		t.Fatal(err)
	}
	stored := func() string {
		var src, dst string
		if err := s.r.QueryRow(`SELECT src_tokens, dst_token FROM files WHERE job_id = ?`, j.ID).Scan(&src, &dst); err != nil {
			t.Fatal(err)
		}
		return src + dst
	}
	if stored() == "" {
		t.Fatal("tokens not stored")
	}
	c, err := s.Claim(ctx, "w1", "a -> b", 1, time.Now(), time.Minute)
	if err != nil || len(c) != 1 {
		t.Fatal(c, err)
	}
	if err := s.Finish(ctx, "w1", store.Attempt{FileKey: c[0].FileKey, N: 1}, store.FileFinished, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != "" {
		t.Errorf("tokens kept after the end: %q", got)
	}
}

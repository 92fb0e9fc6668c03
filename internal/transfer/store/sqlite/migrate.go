package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are the schema's steps, applied in order: migrations[i]
// brings the schema from version i to i+1. Never edit one that has been
// released; append a new one.
var migrations = []string{
	// 1: jobs, files, attempts, decisions.
	`
CREATE TABLE jobs (
	id        TEXT PRIMARY KEY,
	submitter TEXT NOT NULL,
	state     TEXT NOT NULL,
	params    TEXT NOT NULL, -- JSON
	created   TEXT NOT NULL,
	updated   TEXT NOT NULL
);
CREATE INDEX jobs_created ON jobs (created);
CREATE INDEX jobs_state_created ON jobs (state, created);

CREATE TABLE files (
	job_id      TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	idx         INTEGER NOT NULL,
	sources     TEXT    NOT NULL, -- JSON array of URLs
	destination TEXT    NOT NULL,
	checksum    TEXT    NOT NULL,
	filesize    INTEGER NOT NULL,
	metadata    TEXT,             -- JSON, or NULL
	link        TEXT    NOT NULL,
	priority    INTEGER NOT NULL,
	submitter   TEXT    NOT NULL,
	submitted   TEXT    NOT NULL, -- the job's creation: age for Claim
	state       TEXT    NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	not_before  TEXT    NOT NULL DEFAULT '',
	owner       TEXT    NOT NULL DEFAULT '',
	lease_until TEXT    NOT NULL DEFAULT '',
	error_class TEXT    NOT NULL DEFAULT '',
	reason      TEXT    NOT NULL DEFAULT '',
	bytes       INTEGER NOT NULL DEFAULT 0,
	rate        REAL    NOT NULL DEFAULT 0,
	mode        TEXT    NOT NULL DEFAULT '',
	started     TEXT    NOT NULL DEFAULT '',
	ended       TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (job_id, idx)
);
-- Claim and Links: the claimable (and active) files of a link, by
-- priority and submitter, oldest first; with not_before, the claim's
-- queries read the index alone.
CREATE INDEX files_claim ON files (state, link, priority, submitter, submitted, job_id, idx, not_before);
-- Job counts, and whether a job still has open files.
CREATE INDEX files_job_state ON files (job_id, state);
-- Expire: active files by lease end.
CREATE INDEX files_lease ON files (state, lease_until);

CREATE TABLE attempts (
	job_id      TEXT    NOT NULL,
	idx         INTEGER NOT NULL,
	n           INTEGER NOT NULL,
	owner       TEXT    NOT NULL,
	started     TEXT    NOT NULL,
	ended       TEXT    NOT NULL,
	source      TEXT    NOT NULL,
	destination TEXT    NOT NULL,
	mode        TEXT    NOT NULL,
	bytes       INTEGER NOT NULL,
	error_class TEXT    NOT NULL,
	message     TEXT    NOT NULL,
	PRIMARY KEY (job_id, idx, n),
	FOREIGN KEY (job_id, idx) REFERENCES files (job_id, idx) ON DELETE CASCADE
);

CREATE TABLE decisions (
	id      INTEGER PRIMARY KEY,
	link    TEXT    NOT NULL,
	time    TEXT    NOT NULL,
	active  INTEGER NOT NULL,
	rate    REAL    NOT NULL,
	success REAL    NOT NULL,
	reason  TEXT    NOT NULL
);
CREATE INDEX decisions_link_time ON decisions (link, time);
CREATE INDEX decisions_time ON decisions (time);
`,
}

// migrate brings db's schema to len(migrations) in one transaction, or
// refuses a database newer than this binary.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: one migrator at a time
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version INTEGER NOT NULL PRIMARY KEY,
		applied TEXT    NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&have); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this wanda knows (%d): use a newer wanda", have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied) VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))`, v); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

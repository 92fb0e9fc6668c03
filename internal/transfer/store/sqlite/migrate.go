package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// migration is one step of the schema: SQL, then a Go step (nil: none)
// for what SQL says badly (parsing URLs), in the same transaction.
type migration struct {
	sql string
	fn  func(ctx context.Context, tx *sql.Tx) error
}

// migrations are the schema's steps, applied in order: migrations[i]
// brings the schema from version i to i+1. Never edit one that has been
// released; append a new one.
var migrations = []migration{
	// 1: jobs, files, attempts, decisions.
	{sql: `
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
`},
	// 2: FTS3's job and file model: job type, identity, storages,
	// reason and end; a file's source in use and sources tried, its
	// storages, activity, selection strategy and tokens; banned storages
	// and storage configuration.
	{sql: `
ALTER TABLE jobs ADD COLUMN job_type  TEXT NOT NULL DEFAULT 'N';
ALTER TABLE jobs ADD COLUMN user_dn   TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN vo_name   TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN cred_id   TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN source_se TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN dest_se   TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN reason    TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN finished  TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN deadline  TEXT NOT NULL DEFAULT '';
UPDATE jobs SET user_dn = submitter,
	finished = CASE WHEN state IN ('FINISHED', 'FINISHEDDIRTY', 'FAILED', 'CANCELED') THEN updated ELSE '' END;
UPDATE jobs SET job_type = 'R'
	WHERE EXISTS (SELECT 1 FROM files f WHERE f.job_id = jobs.id AND json_array_length(f.sources) > 1);
CREATE INDEX jobs_finished ON jobs (finished, created);
CREATE INDEX jobs_deadline ON jobs (deadline) WHERE deadline <> '';

ALTER TABLE files ADD COLUMN source_index INTEGER NOT NULL DEFAULT 0;
ALTER TABLE files ADD COLUMN tried        INTEGER NOT NULL DEFAULT 0;
ALTER TABLE files ADD COLUMN source_se    TEXT    NOT NULL DEFAULT '';
ALTER TABLE files ADD COLUMN dest_se      TEXT    NOT NULL DEFAULT '';
ALTER TABLE files ADD COLUMN activity     TEXT    NOT NULL DEFAULT 'default';
ALTER TABLE files ADD COLUMN selection    TEXT    NOT NULL DEFAULT 'orderly';
ALTER TABLE files ADD COLUMN src_tokens   TEXT    NOT NULL DEFAULT ''; -- JSON array, secrets
ALTER TABLE files ADD COLUMN dst_token    TEXT    NOT NULL DEFAULT ''; -- a secret
-- Bans: the open files of a storage.
CREATE INDEX files_source_se ON files (source_se, state);
CREATE INDEX files_dest_se ON files (dest_se, state);

CREATE TABLE bans (
	se       TEXT    PRIMARY KEY,
	vo       TEXT    NOT NULL,
	status   TEXT    NOT NULL,
	message  TEXT    NOT NULL,
	admin_dn TEXT    NOT NULL,
	added    TEXT    NOT NULL,
	timeout  INTEGER NOT NULL
);
CREATE TABLE se_config (
	se         TEXT PRIMARY KEY,
	info       TEXT NOT NULL, -- JSON object
	operations TEXT NOT NULL  -- JSON object
);
`, fn: backfillStorages},
	// 3: X.509 proxy delegation: pending certificate requests and the
	// delegated proxies, with their private keys (secrets).
	{sql: `
CREATE TABLE delegation_requests (
	dlg_id   TEXT NOT NULL,
	dn       TEXT NOT NULL,
	request  TEXT NOT NULL,
	priv_key TEXT NOT NULL, -- a secret
	created  TEXT NOT NULL,
	PRIMARY KEY (dlg_id, dn)
);
CREATE INDEX delegation_requests_created ON delegation_requests (created);
CREATE TABLE credentials (
	dlg_id   TEXT NOT NULL,
	dn       TEXT NOT NULL,
	chain    TEXT NOT NULL,
	priv_key TEXT NOT NULL, -- a secret
	fqans    TEXT NOT NULL, -- one a line
	expires  TEXT NOT NULL,
	stored   TEXT NOT NULL,
	PRIMARY KEY (dlg_id, dn)
);
CREATE INDEX credentials_expires ON credentials (expires);
`},
}

// backfillStorages sets the storages of the files and jobs stored before
// version 2.
func backfillStorages(ctx context.Context, tx *sql.Tx) error {
	var fs []store.Legacy
	err := each(ctx, tx, func(r *sql.Rows) error {
		var f store.Legacy
		var src string
		if err := r.Scan(&f.Job, &f.Index, &src, &f.Destination); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(src), &f.Sources); err != nil || len(f.Sources) == 0 {
			return fmt.Errorf("file %s/%d: stored sources %q: %v", f.Job, f.Index, src, err)
		}
		fs = append(fs, f)
		return nil
	}, `SELECT job_id, idx, sources, destination FROM files WHERE source_se = '' ORDER BY job_id, idx`)
	if err != nil {
		return err
	}
	ses, jobs := store.LegacyStorages(fs)
	for i, f := range fs {
		if _, err := tx.ExecContext(ctx, `UPDATE files SET source_se = ?, dest_se = ? WHERE job_id = ? AND idx = ?`,
			ses[i][0], ses[i][1], f.Job, f.Index); err != nil {
			return err
		}
	}
	for id, j := range jobs {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET source_se = ?, dest_se = ? WHERE id = ?`, j[0], j[1], id); err != nil {
			return err
		}
	}
	return nil
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
		m := migrations[v-1]
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v, err)
		}
		if m.fn != nil {
			if err := m.fn(ctx, tx); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", v, err)
			}
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

package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// migrations are the schema's steps, applied in order: migrations[i]
// brings the schema from version i to i+1. Never edit one that has been
// released; append a new one.
var migrations = []migration{
	// 1: jobs, files, attempts, decisions.
	{sql: `
CREATE TABLE jobs (
	id        text COLLATE "C" PRIMARY KEY,
	submitter text COLLATE "C" NOT NULL,
	state     text        NOT NULL,
	params    json        NOT NULL,
	created   timestamptz NOT NULL,
	updated   timestamptz NOT NULL
);
CREATE INDEX jobs_created ON jobs (created);
CREATE INDEX jobs_state_created ON jobs (state, created);

CREATE TABLE files (
	job_id      text COLLATE "C" NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	idx         integer     NOT NULL,
	sources     text[]      NOT NULL,
	destination text        NOT NULL,
	checksum    text        NOT NULL,
	filesize    bigint      NOT NULL,
	metadata    json,
	link        text COLLATE "C" NOT NULL,
	priority    integer     NOT NULL,
	submitter   text COLLATE "C" NOT NULL,
	submitted   timestamptz NOT NULL, -- the job's creation: age for Claim
	state       text        NOT NULL,
	attempts    integer     NOT NULL DEFAULT 0,
	not_before  timestamptz,          -- NULL: claimable now
	owner       text        NOT NULL DEFAULT '',
	lease_until timestamptz,
	error_class text        NOT NULL DEFAULT '',
	reason      text        NOT NULL DEFAULT '',
	bytes       bigint      NOT NULL DEFAULT 0,
	rate        double precision NOT NULL DEFAULT 0,
	mode        text        NOT NULL DEFAULT '',
	started     timestamptz,
	ended       timestamptz,
	PRIMARY KEY (job_id, idx)
);
-- Claim: a link's waiting files by priority, submitter and age.
CREATE INDEX files_claim ON files (link, priority DESC, submitter, submitted, job_id, idx, not_before)
	WHERE state = 'SUBMITTED';
-- Claim's fair share and Links: a link's active files by submitter.
CREATE INDEX files_active ON files (link, submitter) WHERE state = 'ACTIVE';
-- Expire: active files by lease end.
CREATE INDEX files_lease ON files (lease_until) WHERE state = 'ACTIVE';
-- Job counts, and whether a job still has open files.
CREATE INDEX files_job_state ON files (job_id, state);

CREATE TABLE attempts (
	job_id      text COLLATE "C" NOT NULL,
	idx         integer     NOT NULL,
	n           integer     NOT NULL,
	owner       text        NOT NULL,
	started     timestamptz,
	ended       timestamptz,
	source      text        NOT NULL,
	destination text        NOT NULL,
	mode        text        NOT NULL,
	bytes       bigint      NOT NULL,
	error_class text        NOT NULL,
	message     text        NOT NULL,
	PRIMARY KEY (job_id, idx, n),
	FOREIGN KEY (job_id, idx) REFERENCES files (job_id, idx) ON DELETE CASCADE
);

CREATE TABLE decisions (
	id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	link    text COLLATE "C" NOT NULL,
	time    timestamptz NOT NULL,
	active  integer     NOT NULL,
	rate    double precision NOT NULL,
	success double precision NOT NULL,
	reason  text        NOT NULL
);
CREATE INDEX decisions_link_time ON decisions (link, time);
CREATE INDEX decisions_time ON decisions (time);
`},
	// 2: FTS3's job and file model: job type, identity, storages,
	// reason and end; a file's source in use and sources tried, its
	// storages, activity, selection strategy and tokens; banned storages
	// and storage configuration.
	{sql: `
ALTER TABLE jobs
	ADD COLUMN job_type  text NOT NULL DEFAULT 'N',
	ADD COLUMN user_dn   text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN vo_name   text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN cred_id   text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN source_se text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN dest_se   text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN reason    text NOT NULL DEFAULT '',
	ADD COLUMN finished  timestamptz,
	ADD COLUMN deadline  timestamptz;
UPDATE jobs SET user_dn = submitter,
	finished = CASE WHEN state IN ('FINISHED', 'FINISHEDDIRTY', 'FAILED', 'CANCELED') THEN updated END;
UPDATE jobs SET job_type = 'R'
	WHERE EXISTS (SELECT 1 FROM files f WHERE f.job_id = jobs.id AND cardinality(f.sources) > 1);
CREATE INDEX jobs_open ON jobs (created) WHERE finished IS NULL;
CREATE INDEX jobs_finished ON jobs (finished);
CREATE INDEX jobs_deadline ON jobs (deadline) WHERE deadline IS NOT NULL AND finished IS NULL;

ALTER TABLE files
	ADD COLUMN source_index integer NOT NULL DEFAULT 0,
	ADD COLUMN tried        integer NOT NULL DEFAULT 0,
	ADD COLUMN source_se    text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN dest_se      text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN activity     text NOT NULL DEFAULT 'default',
	ADD COLUMN selection    text NOT NULL DEFAULT 'orderly',
	ADD COLUMN src_tokens   text NOT NULL DEFAULT '', -- JSON array, secrets
	ADD COLUMN dst_token    text NOT NULL DEFAULT ''; -- a secret
-- Bans: the open files of a storage.
CREATE INDEX files_source_se ON files (source_se, state);
CREATE INDEX files_dest_se ON files (dest_se, state);

CREATE TABLE bans (
	se       text COLLATE "C" PRIMARY KEY,
	vo       text        NOT NULL,
	status   text        NOT NULL,
	message  text        NOT NULL,
	admin_dn text        NOT NULL,
	added    timestamptz NOT NULL,
	timeout  integer     NOT NULL
);
CREATE TABLE se_config (
	se         text COLLATE "C" PRIMARY KEY,
	info       json NOT NULL,
	operations json NOT NULL
);
`, fn: backfillStorages},
	// 3: X.509 proxy delegation: pending certificate requests and the
	// delegated proxies, with their private keys (secrets).
	{sql: `
CREATE TABLE delegation_requests (
	dlg_id   text COLLATE "C" NOT NULL,
	dn       text COLLATE "C" NOT NULL,
	request  text        NOT NULL,
	priv_key text        NOT NULL,
	created  timestamptz NOT NULL,
	PRIMARY KEY (dlg_id, dn)
);
CREATE INDEX delegation_requests_created ON delegation_requests (created);
CREATE TABLE credentials (
	dlg_id   text COLLATE "C" NOT NULL,
	dn       text COLLATE "C" NOT NULL,
	chain    text        NOT NULL,
	priv_key text        NOT NULL,
	fqans    text        NOT NULL,
	expires  timestamptz NOT NULL,
	stored   timestamptz NOT NULL,
	PRIMARY KEY (dlg_id, dn)
);
CREATE INDEX credentials_expires ON credentials (expires);
`},
}

// migration is one step of the schema: SQL, then a Go step (nil: none)
// for what SQL says badly (parsing URLs), in the same transaction.
type migration struct {
	sql string
	fn  func(ctx context.Context, tx pgx.Tx) error
}

// backfillStorages sets the storages of the files and jobs stored before
// version 2.
func backfillStorages(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT job_id, idx, sources, destination FROM files WHERE source_se = '' ORDER BY job_id, idx`)
	if err != nil {
		return err
	}
	var fs []store.Legacy
	var f store.Legacy
	if _, err := pgx.ForEachRow(rows, []any{&f.Job, &f.Index, &f.Sources, &f.Destination}, func() error {
		if len(f.Sources) == 0 {
			return fmt.Errorf("file %s/%d: no sources stored", f.Job, f.Index)
		}
		fs = append(fs, f)
		return nil
	}); err != nil {
		return err
	}
	ses, jobs := store.LegacyStorages(fs)
	for i, f := range fs {
		if _, err := tx.Exec(ctx, `UPDATE files SET source_se = $3, dest_se = $4 WHERE job_id = $1 AND idx = $2`,
			f.Job, f.Index, ses[i][0], ses[i][1]); err != nil {
			return err
		}
	}
	for id, j := range jobs {
		if _, err := tx.Exec(ctx, `UPDATE jobs SET source_se = $2, dest_se = $3 WHERE id = $1`, id, j[0], j[1]); err != nil {
			return err
		}
	}
	return nil
}

// migrateLock is the advisory lock key that serializes migrations between
// instances ("wanda transfer schema", as eight bytes).
const migrateLock = 0x77616e6461747273

// migrate brings the schema to len(migrations) in one transaction, under
// the advisory lock, or refuses a database newer than this binary.
func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
			version integer PRIMARY KEY,
			applied timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&have); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if have > len(migrations) {
			return fmt.Errorf("database schema version %d is newer than this wanda knows (%d): use a newer wanda", have, len(migrations))
		}
		for v := have + 1; v <= len(migrations); v++ {
			m := migrations[v-1]
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", v, err)
			}
			if m.fn != nil {
				if err := m.fn(ctx, tx); err != nil {
					return fmt.Errorf("migrate to schema version %d: %w", v, err)
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, v); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", v, err)
			}
		}
		return nil
	})
}

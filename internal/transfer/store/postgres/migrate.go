package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// migrations are the schema's steps, applied in order: migrations[i]
// brings the schema from version i to i+1. Never edit one that has been
// released; append a new one.
var migrations = []string{
	// 1: jobs, files, attempts, decisions.
	`
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
`,
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
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, v); err != nil {
				return fmt.Errorf("migrate to schema version %d: %w", v, err)
			}
		}
		return nil
	})
}

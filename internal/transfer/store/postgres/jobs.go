package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Submit implements store.Store.
func (s *Store) Submit(ctx context.Context, j store.Job, files []store.File) (store.Job, bool, error) {
	params, err := store.PrepareSubmit(&j, files)
	if err != nil {
		return store.Job{}, false, err
	}
	now := utc(time.Now())
	created := false
	err = s.tx(ctx, func(tx pgx.Tx) error {
		created = false
		tag, err := tx.Exec(ctx, `INSERT INTO jobs (id, submitter, state, params, created, updated,
				job_type, user_dn, vo_name, cred_id, source_se, dest_se, deadline)
			VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (id) DO NOTHING`,
			j.ID, j.Submitter, store.JobSubmitted, string(params), now,
			j.Type, j.UserDN, j.VO, j.CredID, j.SourceSE, j.DestSE, opt(j.Deadline))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // resubmission: the job stands as it is
		}
		created = true
		rows := make([][]any, len(files))
		for i, f := range files {
			var meta any
			if len(f.Metadata) > 0 {
				meta = string(f.Metadata)
			}
			src := f.Sources
			if src == nil {
				src = []string{}
			}
			rows[i] = []any{j.ID, i, src, f.Destination, f.Checksum, f.Filesize, meta, f.Link,
				j.Params.Priority, j.Submitter, now, string(f.State),
				f.SourceIndex, f.SourceSE, f.DestSE, f.Activity, f.Selection, store.Tokens(f), f.DestToken}
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"files"},
			[]string{"job_id", "idx", "sources", "destination", "checksum", "filesize", "metadata", "link",
				"priority", "submitter", "submitted", "state",
				"source_index", "source_se", "dest_se", "activity", "selection", "src_tokens", "dst_token"},
			pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		return store.Job{}, false, fmt.Errorf("submit %s: %w", j.ID, err)
	}
	stored, err := s.Job(ctx, j.ID)
	return stored, created, err
}

// jobCols are the columns scanJob reads: the job and its file counts (as
// a JSON object), in one statement so that they agree.
const jobCols = `j.id, j.submitter, j.state, j.params, j.created, j.updated,
	j.job_type, j.user_dn, j.vo_name, j.cred_id, j.source_se, j.dest_se, j.reason, j.finished, j.deadline,
	(SELECT coalesce(json_object_agg(state, n), '{}') FROM (
		SELECT state, count(*) AS n FROM files WHERE job_id = j.id GROUP BY state) c)`

// jobColsNoCounts are jobCols with an empty object for the counts.
const jobColsNoCounts = `j.id, j.submitter, j.state, j.params, j.created, j.updated,
	j.job_type, j.user_dn, j.vo_name, j.cred_id, j.source_se, j.dest_se, j.reason, j.finished, j.deadline, '{}'::json`

// scanJob reads one row of jobCols.
func scanJob(row pgx.Row) (store.Job, error) {
	var j store.Job
	var params, counts []byte
	var finished, deadline *time.Time
	if err := row.Scan(&j.ID, &j.Submitter, &j.State, &params, &j.Created, &j.Updated,
		&j.Type, &j.UserDN, &j.VO, &j.CredID, &j.SourceSE, &j.DestSE, &j.Reason, &finished, &deadline, &counts); err != nil {
		return j, err
	}
	j.Created, j.Updated = j.Created.UTC(), j.Updated.UTC()
	j.Finished, j.Deadline = fromOpt(finished), fromOpt(deadline)
	if err := json.Unmarshal(params, &j.Params); err != nil {
		return j, fmt.Errorf("job %s: stored params: %w", j.ID, err)
	}
	j.Files = store.Counts()
	if err := json.Unmarshal(counts, &j.Files); err != nil {
		return j, fmt.Errorf("job %s: file counts: %w", j.ID, err)
	}
	return j, nil
}

// Job implements store.Store.
func (s *Store) Job(ctx context.Context, id string) (store.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobCols+` FROM jobs j WHERE j.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	return j, nil
}

// ListJobs implements store.Store.
func (s *Store) ListJobs(ctx context.Context, q store.JobQuery) ([]store.Job, error) {
	var states, before any // NULL: no condition
	if len(q.States) > 0 {
		ss := make([]string, len(q.States))
		for i, st := range q.States {
			ss[i] = string(st)
		}
		states = ss
	}
	if !q.Before.IsZero() {
		before = utc(q.Before)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	var finishedAfter any
	if !q.FinishedAfter.IsZero() {
		finishedAfter = utc(q.FinishedAfter)
	}
	cols := jobCols
	if q.NoCounts {
		cols = jobColsNoCounts
	}
	rows, err := s.pool.Query(ctx, `SELECT `+cols+` FROM jobs j
		WHERE ($1::text[] IS NULL OR j.state = ANY ($1))
			AND ($2::timestamptz IS NULL OR j.created < $2)
			AND (NOT $4 OR j.finished IS NULL OR ($5::timestamptz IS NOT NULL AND j.finished >= $5))
			AND ($6 = '' OR j.user_dn = $6) AND ($7 = '' OR j.vo_name = $7) AND ($8 = '' OR j.cred_id = $8)
			AND ($9 = '' OR j.source_se = $9) AND ($10 = '' OR j.dest_se = $10)
		ORDER BY j.created DESC, j.id DESC
		LIMIT $3`, states, before, limit, q.Unfinished, finishedAfter, q.UserDN, q.VO, q.CredID, q.SourceSE, q.DestSE)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	js := []store.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		js = append(js, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return js, nil
}

// fileCols are the columns scanFile reads, in its order (f is files).
const fileCols = `f.job_id, f.idx, f.sources, f.destination, f.checksum, f.filesize, f.metadata, f.link,
	f.priority, f.submitter, f.state, f.attempts, f.not_before, f.owner, f.lease_until,
	f.error_class, f.reason, f.bytes, f.rate, f.mode, f.started, f.ended,
	f.source_index, f.tried, f.source_se, f.dest_se, f.activity, f.selection`

// scanFile reads one row of fileCols, and then into extra.
func scanFile(row pgx.Row, extra ...any) (store.File, error) {
	var f store.File
	var meta []byte
	var notBefore, leaseUntil, started, ended *time.Time
	dst := append([]any{&f.Job, &f.Index, &f.Sources, &f.Destination, &f.Checksum, &f.Filesize, &meta, &f.Link,
		&f.Priority, &f.Submitter, &f.State, &f.Attempts, &notBefore, &f.Owner, &leaseUntil,
		&f.ErrorClass, &f.Reason, &f.Bytes, &f.Rate, &f.Mode, &started, &ended,
		&f.SourceIndex, &f.Tried, &f.SourceSE, &f.DestSE, &f.Activity, &f.Selection}, extra...)
	if err := row.Scan(dst...); err != nil {
		return f, err
	}
	if len(meta) > 0 {
		f.Metadata = json.RawMessage(meta)
	}
	f.NotBefore, f.LeaseUntil, f.Started, f.Ended = fromOpt(notBefore), fromOpt(leaseUntil), fromOpt(started), fromOpt(ended)
	return f, nil
}

// Files implements store.Store.
func (s *Store) Files(ctx context.Context, id string) ([]store.File, error) {
	var fs []store.File
	err := s.read(ctx, func(tx pgx.Tx) error {
		fs = []store.File{}
		if err := exists(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+fileCols+` FROM files f WHERE f.job_id = $1 ORDER BY f.idx`, id)
		if err != nil {
			return err
		}
		fs, err = pgx.AppendRows(fs, rows, func(r pgx.CollectableRow) (store.File, error) { return scanFile(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("files of job %s: %w", id, err)
	}
	return fs, nil
}

// read runs fn in a read-only REPEATABLE READ transaction: one snapshot
// for all its queries.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// exists is ErrNotFound when there is no job id.
func exists(ctx context.Context, tx pgx.Tx, id string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM jobs WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// Attempts implements store.Store.
func (s *Store) Attempts(ctx context.Context, id string) ([]store.Attempt, error) {
	var as []store.Attempt
	err := s.read(ctx, func(tx pgx.Tx) error {
		as = []store.Attempt{}
		if err := exists(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT job_id, idx, n, owner, started, ended, source, destination,
			mode, bytes, error_class, message FROM attempts WHERE job_id = $1 ORDER BY idx, n`, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a store.Attempt
			var start, end *time.Time
			if err := rows.Scan(&a.Job, &a.Index, &a.N, &a.Owner, &start, &end, &a.Source, &a.Destination,
				&a.Mode, &a.Bytes, &a.ErrorClass, &a.Message); err != nil {
				return err
			}
			a.Start, a.End = fromOpt(start), fromOpt(end)
			as = append(as, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of job %s: %w", id, err)
	}
	return as, nil
}

// openStates is the SQL list of store.FileState.Open's states.
const openStates = `('SUBMITTED', 'READY', 'ACTIVE', 'ON_HOLD')`

// lockOpen locks the open files of job id that where selects (a
// condition on files f after $1), in index order (the lock order), then
// the job, and returns its state: a claim or a finish in flight
// completes first.
func lockOpen(ctx context.Context, tx pgx.Tx, id, where string, args ...any) (store.JobState, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM files f WHERE f.job_id = $1 AND f.state IN `+openStates+` AND `+where+`
		ORDER BY f.idx FOR NO KEY UPDATE`, append([]any{id}, args...)...); err != nil {
		return "", err
	}
	var state store.JobState
	err := tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1 FOR NO KEY UPDATE`, id).Scan(&state)
	return state, err
}

// lockJob locks a job and its open files (lockOpen) and reports whether
// it has ended; ErrNotFound.
func lockJob(ctx context.Context, tx pgx.Tx, id string) (final bool, err error) {
	if err := exists(ctx, tx, id); err != nil {
		return false, err
	}
	state, err := lockOpen(ctx, tx, id, "true")
	return state.Final(), err
}

// cancelFiles cancels the open files of job id that where (a condition
// on files f after $1-$3) selects, at now: the attempts in flight are
// recorded as canceled, their owners learn it at their next renewal.
func cancelFiles(ctx context.Context, tx pgx.Tx, id string, now time.Time, reason, where string, args ...any) error {
	a := append([]any{id, now, reason, store.ClassCanceled}, args...)
	if _, err := tx.Exec(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
			source, destination, mode, bytes, error_class, message)
		SELECT f.job_id, f.idx, f.attempts, f.owner, f.started, $2, '', f.destination, '', 0, $4, $3
		FROM files f WHERE f.job_id = $1 AND f.state = 'ACTIVE' AND `+where, a...); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE files f SET state = 'CANCELED', owner = '', lease_until = NULL,
			error_class = $4, reason = $3, src_tokens = '', dst_token = '',
			ended = CASE WHEN f.state = 'ACTIVE' THEN $2 ELSE f.ended END
		WHERE f.job_id = $1 AND f.state IN `+openStates+` AND `+where, a...)
	return err
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, id, reason string) (store.Job, error) {
	now := utc(time.Now())
	final := false
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		if final, err = lockJob(ctx, tx, id); err != nil || final {
			return err
		}
		if err := cancelFiles(ctx, tx, id, now, reason, "true"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE files SET src_tokens = '', dst_token = ''
			WHERE job_id = $1 AND src_tokens || dst_token <> ''`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE jobs SET state = 'CANCELED', reason = $3, updated = $2, finished = $2 WHERE id = $1`, id, now, reason)
		return err
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("cancel job %s: %w", id, err)
	}
	j, err := s.Job(ctx, id)
	if err == nil && final {
		err = fmt.Errorf("cancel job %s: %w", id, store.ErrFinal)
	}
	return j, err
}

// CancelFiles implements store.Store.
func (s *Store) CancelFiles(ctx context.Context, id string, idx []int, reason string) ([]store.FileState, store.Job, error) {
	now := utc(time.Now())
	var out []store.FileState
	err := s.tx(ctx, func(tx pgx.Tx) error {
		out = make([]store.FileState, len(idx))
		if err := exists(ctx, tx, id); err != nil {
			return err
		}
		ks := make([]int32, len(idx))
		for i, k := range idx {
			ks[i] = int32(k)
		}
		if _, err := lockOpen(ctx, tx, id, "f.idx = ANY ($2)", ks); err != nil {
			return err
		}
		if err := cancelFiles(ctx, tx, id, now, reason, "f.idx = ANY ($5)", ks); err != nil {
			return err
		}
		for i, k := range idx {
			err := tx.QueryRow(ctx, `SELECT state FROM files WHERE job_id = $1 AND idx = $2`, id, k).Scan(&out[i])
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE jobs SET state = 'CANCELED', reason = 'files canceled', updated = $2, finished = $2
			WHERE id = $1 AND state NOT IN ('FINISHED', 'FINISHEDDIRTY', 'FAILED', 'CANCELED')
				AND NOT EXISTS (SELECT 1 FROM files WHERE job_id = $1 AND state IN `+openStates+`)`, id, now)
		return err
	})
	if err != nil {
		return nil, store.Job{}, fmt.Errorf("cancel files of job %s: %w", id, err)
	}
	j, err := s.Job(ctx, id)
	return out, j, err
}

// SetPriority implements store.Store.
func (s *Store) SetPriority(ctx context.Context, id string, priority int) (store.Job, error) {
	final := false
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		if final, err = lockJob(ctx, tx, id); err != nil || final {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE files SET priority = $2 WHERE job_id = $1`, id, priority); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE jobs SET params = jsonb_set(params::jsonb, '{priority}', to_jsonb($2::integer))::json,
			updated = $3 WHERE id = $1`, id, priority, utc(time.Now()))
		return err
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("priority of job %s: %w", id, err)
	}
	j, err := s.Job(ctx, id)
	if err == nil && final {
		err = fmt.Errorf("priority of job %s: %w", id, store.ErrFinal)
	}
	return j, err
}

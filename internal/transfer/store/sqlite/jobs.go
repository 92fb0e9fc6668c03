package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Submit implements store.Store.
func (s *Store) Submit(ctx context.Context, j store.Job, files []store.File) (store.Job, bool, error) {
	params, err := store.PrepareSubmit(&j, files)
	if err != nil {
		return store.Job{}, false, err
	}
	now := ts(time.Now())
	created := false
	err = s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, submitter, state, params, created, updated,
				job_type, user_dn, vo_name, cred_id, source_se, dest_se, deadline)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			j.ID, j.Submitter, store.JobSubmitted, string(params), now, now,
			j.Type, j.UserDN, j.VO, j.CredID, j.SourceSE, j.DestSE, ts(j.Deadline))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // resubmission: the job stands as it is
		}
		created = true
		for i, f := range files {
			src, err := json.Marshal(f.Sources)
			if err != nil {
				return err
			}
			var meta any
			if len(f.Metadata) > 0 {
				meta = string(f.Metadata)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO files (job_id, idx, sources, destination,
					checksum, filesize, metadata, link, priority, submitter, submitted, state,
					source_index, source_se, dest_se, activity, selection, src_tokens, dst_token)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, j.ID, i, string(src), f.Destination, f.Checksum,
				f.Filesize, meta, f.Link, j.Params.Priority, j.Submitter, now, f.State,
				f.SourceIndex, f.SourceSE, f.DestSE, f.Activity, f.Selection, store.Tokens(f), f.DestToken); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.Job{}, false, fmt.Errorf("submit %s: %w", j.ID, err)
	}
	stored, err := s.Job(ctx, j.ID)
	return stored, created, err
}

// Job implements store.Store.
func (s *Store) Job(ctx context.Context, id string) (store.Job, error) {
	var j store.Job
	err := s.read(ctx, func(tx *sql.Tx) error {
		js, err := queryJobs(ctx, tx, `WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if len(js) == 0 {
			return store.ErrNotFound
		}
		j = js[0]
		return nil
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	return j, nil
}

// ListJobs implements store.Store.
func (s *Store) ListJobs(ctx context.Context, q store.JobQuery) ([]store.Job, error) {
	where, args := "WHERE 1 = 1", []any{}
	if len(q.States) > 0 {
		where += " AND state IN (" + placeholders(len(q.States)) + ")"
		for _, st := range q.States {
			args = append(args, string(st))
		}
	}
	if !q.Before.IsZero() {
		where += " AND created < ?"
		args = append(args, ts(q.Before))
	}
	if q.Unfinished {
		if q.FinishedAfter.IsZero() {
			where += " AND finished = ''"
		} else {
			where += " AND (finished = '' OR finished >= ?)"
			args = append(args, ts(q.FinishedAfter))
		}
	}
	for _, c := range []struct{ col, v string }{
		{"user_dn", q.UserDN}, {"vo_name", q.VO}, {"cred_id", q.CredID}, {"source_se", q.SourceSE}, {"dest_se", q.DestSE},
	} {
		if c.v != "" {
			where += " AND " + c.col + " = ?"
			args = append(args, c.v)
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	where += " ORDER BY created DESC, id DESC LIMIT ?"
	args = append(args, limit)
	var js []store.Job
	err := s.read(ctx, func(tx *sql.Tx) (err error) {
		js, err = queryJobsCounted(ctx, tx, !q.NoCounts, where, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return js, nil
}

// jobCols are the columns queryJobs reads.
const jobCols = `id, submitter, state, params, created, updated, job_type, user_dn, vo_name, cred_id,
	source_se, dest_se, reason, finished, deadline`

// queryJobs reads the jobs selected by where (a WHERE clause and what
// follows) with their file counts.
func queryJobs(ctx context.Context, tx querier, where string, args ...any) ([]store.Job, error) {
	return queryJobsCounted(ctx, tx, true, where, args...)
}

// queryJobsCounted is queryJobs, with the counts only when counts.
func queryJobsCounted(ctx context.Context, tx querier, counts bool, where string, args ...any) ([]store.Job, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+jobCols+` FROM jobs `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	js := []store.Job{}
	for rows.Next() {
		var j store.Job
		var params, created, updated, finished, deadline string
		if err := rows.Scan(&j.ID, &j.Submitter, &j.State, &params, &created, &updated, &j.Type, &j.UserDN, &j.VO, &j.CredID,
			&j.SourceSE, &j.DestSE, &j.Reason, &finished, &deadline); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(params), &j.Params); err != nil {
			return nil, fmt.Errorf("job %s: stored params: %w", j.ID, err)
		}
		for _, t := range []struct {
			dst *time.Time
			s   string
		}{{&j.Created, created}, {&j.Updated, updated}, {&j.Finished, finished}, {&j.Deadline, deadline}} {
			if *t.dst, err = parseTS(t.s); err != nil {
				return nil, err
			}
		}
		js = append(js, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	for i := range js {
		if !counts {
			break
		}
		if js[i].Files, err = fileCounts(ctx, tx, js[i].ID); err != nil {
			return nil, err
		}
	}
	return js, nil
}

// fileCounts counts a job's files by state (every state present).
func fileCounts(ctx context.Context, tx querier, id string) (map[store.FileState]int, error) {
	counts := store.Counts()
	err := each(ctx, tx, func(r *sql.Rows) error {
		var st store.FileState
		var n int
		err := r.Scan(&st, &n)
		counts[st] = n
		return err
	}, `SELECT state, count(*) FROM files WHERE job_id = ? GROUP BY state`, id)
	return counts, err
}

// fileCols are the columns scanFile reads, in its order.
const fileCols = `job_id, idx, sources, destination, checksum, filesize, metadata, link,
	priority, submitter, state, attempts, not_before, owner, lease_until,
	error_class, reason, bytes, rate, mode, started, ended,
	source_index, tried, source_se, dest_se, activity, selection`

// scanFile reads one row of fileCols, and then into extra.
func scanFile(sc interface{ Scan(...any) error }, extra ...any) (store.File, error) {
	var f store.File
	var src string
	var meta sql.NullString
	var notBefore, leaseUntil, started, ended string
	dst := append([]any{&f.Job, &f.Index, &src, &f.Destination, &f.Checksum, &f.Filesize, &meta, &f.Link,
		&f.Priority, &f.Submitter, &f.State, &f.Attempts, &notBefore, &f.Owner, &leaseUntil,
		&f.ErrorClass, &f.Reason, &f.Bytes, &f.Rate, &f.Mode, &started, &ended,
		&f.SourceIndex, &f.Tried, &f.SourceSE, &f.DestSE, &f.Activity, &f.Selection}, extra...)
	if err := sc.Scan(dst...); err != nil {
		return f, err
	}
	if err := json.Unmarshal([]byte(src), &f.Sources); err != nil {
		return f, fmt.Errorf("file %s/%d: stored sources: %w", f.Job, f.Index, err)
	}
	if meta.Valid {
		f.Metadata = json.RawMessage(meta.String)
	}
	var err error
	for _, t := range []struct {
		dst *time.Time
		s   string
	}{{&f.NotBefore, notBefore}, {&f.LeaseUntil, leaseUntil}, {&f.Started, started}, {&f.Ended, ended}} {
		if *t.dst, err = parseTS(t.s); err != nil {
			return f, err
		}
	}
	return f, nil
}

// Files implements store.Store.
func (s *Store) Files(ctx context.Context, id string) ([]store.File, error) {
	fs := []store.File{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := exists(ctx, tx, id); err != nil {
			return err
		}
		return each(ctx, tx, func(r *sql.Rows) error {
			f, err := scanFile(r)
			fs = append(fs, f)
			return err
		}, `SELECT `+fileCols+` FROM files WHERE job_id = ? ORDER BY idx`, id)
	})
	if err != nil {
		return nil, fmt.Errorf("files of job %s: %w", id, err)
	}
	return fs, nil
}

// exists is ErrNotFound when there is no job id.
func exists(ctx context.Context, tx querier, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM jobs WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// Attempts implements store.Store.
func (s *Store) Attempts(ctx context.Context, id string) ([]store.Attempt, error) {
	as := []store.Attempt{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := exists(ctx, tx, id); err != nil {
			return err
		}
		return each(ctx, tx, func(r *sql.Rows) error {
			var a store.Attempt
			var start, end string
			err := r.Scan(&a.Job, &a.Index, &a.N, &a.Owner, &start, &end, &a.Source, &a.Destination,
				&a.Mode, &a.Bytes, &a.ErrorClass, &a.Message)
			if err == nil {
				a.Start, err = parseTS(start)
			}
			if err == nil {
				a.End, err = parseTS(end)
			}
			as = append(as, a)
			return err
		}, `SELECT job_id, idx, n, owner, started, ended, source, destination,
			mode, bytes, error_class, message FROM attempts WHERE job_id = ? ORDER BY idx, n`, id)
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of job %s: %w", id, err)
	}
	return as, nil
}

// openStates is the SQL list of store.FileState.Open's states.
const openStates = `('SUBMITTED', 'READY', 'ACTIVE', 'ON_HOLD')`

// cancelFiles cancels the open files of job id that where (a condition
// on files, with args) selects, at now: the attempts in flight are
// recorded as canceled, their owners learn it at their next renewal.
func cancelFiles(ctx context.Context, tx querier, id, now, reason, where string, args ...any) error {
	a := append([]any{now, store.ClassCanceled, reason, id}, args...)
	if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
			source, destination, mode, bytes, error_class, message)
		SELECT job_id, idx, attempts, owner, started, ?, '', destination, '', 0, ?, ?
		FROM files WHERE job_id = ? AND state = 'ACTIVE' AND `+where, a...); err != nil {
		return err
	}
	a = append([]any{store.ClassCanceled, reason, now, id}, args...)
	_, err := tx.ExecContext(ctx, `UPDATE files SET state = 'CANCELED', owner = '', lease_until = '',
			error_class = ?, reason = ?, src_tokens = '', dst_token = '',
			ended = CASE WHEN state = 'ACTIVE' THEN ?3 ELSE ended END
		WHERE job_id = ? AND state IN `+openStates+` AND `+where, a...)
	return err
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, id, reason string) (store.Job, error) {
	now := ts(time.Now())
	final := false
	err := s.write(ctx, func(tx *wtx) error {
		var state store.JobState
		err := tx.QueryRowContext(ctx, `SELECT state FROM jobs WHERE id = ?`, id).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if state.Final() {
			final = true
			return nil
		}
		if err := cancelFiles(ctx, tx, id, now, reason, "1 = 1"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE files SET src_tokens = '', dst_token = '' WHERE job_id = ? AND src_tokens || dst_token <> ''`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET state = 'CANCELED', reason = ?, updated = ?, finished = ? WHERE id = ?`,
			reason, now, now, id)
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
	now := ts(time.Now())
	out := make([]store.FileState, len(idx))
	err := s.write(ctx, func(tx *wtx) error {
		if err := exists(ctx, tx, id); err != nil {
			return err
		}
		for i, k := range idx {
			if err := cancelFiles(ctx, tx, id, now, reason, "idx = ?", k); err != nil {
				return err
			}
			err := tx.QueryRowContext(ctx, `SELECT state FROM files WHERE job_id = ? AND idx = ?`, id, k).Scan(&out[i])
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		return settleCanceled(ctx, tx, id, now)
	})
	if err != nil {
		return nil, store.Job{}, fmt.Errorf("cancel files of job %s: %w", id, err)
	}
	j, err := s.Job(ctx, id)
	return out, j, err
}

// settleCanceled ends a job none of whose files is open any more as
// CANCELED (FTS3's rule for files canceled one by one).
func settleCanceled(ctx context.Context, tx querier, id, now string) error {
	_, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'CANCELED', reason = 'files canceled', updated = ?, finished = ?
		WHERE id = ? AND state NOT IN ('FINISHED', 'FINISHEDDIRTY', 'FAILED', 'CANCELED')
			AND NOT EXISTS (SELECT 1 FROM files WHERE job_id = ? AND state IN `+openStates+`)`, now, now, id, id)
	return err
}

// SetPriority implements store.Store.
func (s *Store) SetPriority(ctx context.Context, id string, priority int) (store.Job, error) {
	final := false
	err := s.write(ctx, func(tx *wtx) error {
		js, err := queryJobs(ctx, tx, `WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if len(js) == 0 {
			return store.ErrNotFound
		}
		if js[0].State.Final() {
			final = true
			return nil
		}
		p := js[0].Params
		p.Priority = priority
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET params = ?, updated = ? WHERE id = ?`, string(b), ts(time.Now()), id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE files SET priority = ? WHERE job_id = ?`, priority, id)
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

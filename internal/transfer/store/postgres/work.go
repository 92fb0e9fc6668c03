package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Links implements store.Store.
func (s *Store) Links(ctx context.Context, now time.Time) ([]store.LinkLoad, error) {
	rows, err := s.pool.Query(ctx, `SELECT link, queued, active FROM (
			SELECT link,
				count(*) FILTER (WHERE state = 'SUBMITTED' AND (not_before IS NULL OR not_before <= $1)) AS queued,
				count(*) FILTER (WHERE state = 'ACTIVE') AS active
			FROM files WHERE state IN ('SUBMITTED', 'ACTIVE')
			GROUP BY link) l
		WHERE queued + active > 0
		ORDER BY link`, utc(now))
	if err != nil {
		return nil, fmt.Errorf("links: %w", err)
	}
	ls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.LinkLoad, error) {
		var l store.LinkLoad
		err := r.Scan(&l.Link, &l.Queued, &l.Active)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("links: %w", err)
	}
	return ls, nil
}

// claimSQL claims up to $3 files of link $1 at now $2 for owner $4 until
// $5, in one statement. ranked orders the claimable files: by priority,
// highest first; then by share, the submitter's active files on the link
// plus the file's rank among the submitter's claimable ones (so a claim
// of several files deals them out between submitters, as the sqlite
// store's does, and a lower priority is only reached once the higher
// ones are all taken); then by age. picked locks the first $3 of them
// that nobody else holds (FOR UPDATE SKIP LOCKED cannot go with the
// window function, hence two steps): a claim running beside this one
// skips these rows and takes the next. The lock re-reads the row, so a
// file claimed and committed since ranked's snapshot is dropped by the
// state test.
const claimSQL = `
WITH active AS (
	SELECT submitter, count(*) AS n FROM files
	WHERE state = 'ACTIVE' AND link = $1
	GROUP BY submitter
), ranked AS (
	SELECT f.job_id, f.idx, f.priority, f.submitted,
		coalesce(a.n, 0) + row_number() OVER (
			PARTITION BY f.submitter ORDER BY f.priority DESC, f.submitted, f.job_id, f.idx
		) AS share
	FROM files f LEFT JOIN active a ON a.submitter = f.submitter
	WHERE f.state = 'SUBMITTED' AND f.link = $1 AND (f.not_before IS NULL OR f.not_before <= $2)
), picked AS (
	SELECT f.job_id, f.idx, r.priority, r.share, r.submitted
	FROM files f JOIN ranked r ON r.job_id = f.job_id AND r.idx = f.idx
	WHERE f.state = 'SUBMITTED'
	ORDER BY r.priority DESC, r.share, r.submitted, r.job_id, r.idx
	LIMIT $3
	FOR NO KEY UPDATE OF f SKIP LOCKED
)
UPDATE files f SET state = 'ACTIVE', owner = $4, lease_until = $5,
	attempts = f.attempts + 1, started = $2, ended = NULL
FROM picked p
WHERE f.job_id = p.job_id AND f.idx = p.idx
RETURNING ` + fileCols + `, p.share, p.submitted`

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, owner, link string, n int, now time.Time, lease time.Duration) ([]store.File, error) {
	if n <= 0 {
		return []store.File{}, nil
	}
	type claimed struct {
		store.File
		share     int64
		submitted time.Time
	}
	var cs []claimed
	err := s.tx(ctx, func(tx pgx.Tx) error {
		cs = cs[:0]
		rows, err := tx.Query(ctx, claimSQL, link, utc(now), n, owner, utc(now.Add(lease)))
		if err != nil {
			return err
		}
		for rows.Next() {
			var c claimed
			if c.File, err = scanFile(rows, &c.share, &c.submitted); err != nil {
				rows.Close()
				return err
			}
			cs = append(cs, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(cs) == 0 {
			return nil
		}
		var jobs []string
		for _, c := range cs {
			jobs = append(jobs, c.Job)
		}
		slices.Sort(jobs)
		jobs = slices.Compact(jobs)
		// Lock the jobs still SUBMITTED in id order, then mark them ACTIVE.
		_, err = tx.Exec(ctx, `UPDATE jobs SET state = 'ACTIVE', updated = $2
			WHERE id IN (SELECT id FROM jobs WHERE id = ANY ($1) AND state = 'SUBMITTED' ORDER BY id FOR NO KEY UPDATE)
				AND state = 'SUBMITTED'`, jobs, utc(now))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim on %s for %s: %w", link, owner, err)
	}
	// RETURNING has no order: put the claim's back.
	slices.SortFunc(cs, func(a, b claimed) int {
		switch {
		case a.Priority != b.Priority:
			return b.Priority - a.Priority
		case a.share != b.share:
			return int(a.share - b.share)
		case !a.submitted.Equal(b.submitted):
			return a.submitted.Compare(b.submitted)
		case a.Job != b.Job:
			return strings.Compare(a.Job, b.Job)
		}
		return a.Index - b.Index
	})
	fs := make([]store.File, len(cs))
	for i, c := range cs {
		fs[i] = c.File
	}
	return fs, nil
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, owner string, files []store.FileKey, now time.Time, lease time.Duration) ([]store.FileKey, error) {
	if len(files) == 0 {
		return []store.FileKey{}, nil
	}
	jobs, idxs := make([]string, len(files)), make([]int32, len(files))
	for i, k := range files {
		jobs[i], idxs[i] = k.Job, int32(k.Index)
	}
	lost := []store.FileKey{}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `WITH mine AS (
				SELECT f.job_id, f.idx FROM files f
				JOIN unnest($1::text[], $2::integer[]) AS k (job_id, idx) ON k.job_id = f.job_id AND k.idx = f.idx
				WHERE f.state = 'ACTIVE' AND f.owner = $3
				ORDER BY f.job_id, f.idx
				FOR NO KEY UPDATE OF f
			)
			UPDATE files f SET lease_until = $4
			FROM mine m WHERE f.job_id = m.job_id AND f.idx = m.idx
			RETURNING f.job_id, f.idx`, jobs, idxs, owner, utc(now.Add(lease)))
		if err != nil {
			return err
		}
		kept, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.FileKey, error) {
			var k store.FileKey
			err := r.Scan(&k.Job, &k.Index)
			return k, err
		})
		if err != nil {
			return err
		}
		lost = lost[:0]
		for _, k := range files {
			if !slices.Contains(kept, k) {
				lost = append(lost, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", owner, err)
	}
	return lost, nil
}

// Finish implements store.Store.
func (s *Store) Finish(ctx context.Context, owner string, a store.Attempt, next store.FileState, notBefore time.Time) error {
	if next != store.FileFinished && next != store.FileFailed && next != store.FileSubmitted {
		return fmt.Errorf("finish %s/%d: next state %q: want FINISHED, FAILED or SUBMITTED", a.Job, a.Index, next)
	}
	in := a
	err := s.tx(ctx, func(tx pgx.Tx) error {
		a := in
		var state store.FileState
		var holder string
		var attempts int
		var started *time.Time
		err := tx.QueryRow(ctx, `SELECT state, owner, attempts, started FROM files
			WHERE job_id = $1 AND idx = $2 FOR NO KEY UPDATE`, a.Job, a.Index).Scan(&state, &holder, &attempts, &started)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if state != store.FileActive || holder != owner || (a.N != 0 && a.N != attempts) {
			return store.ErrLeaseLost
		}
		a.N, a.Owner = attempts, owner
		if a.Start.IsZero() {
			a.Start = fromOpt(started)
		}
		if a.End.IsZero() {
			a.End = time.Now()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
				source, destination, mode, bytes, error_class, message)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			a.Job, a.Index, a.N, a.Owner, opt(a.Start), opt(a.End), a.Source, a.Destination,
			a.Mode, a.Bytes, a.ErrorClass, a.Message); err != nil {
			return err
		}
		var nb any
		if next == store.FileSubmitted {
			nb = opt(notBefore)
		}
		if _, err := tx.Exec(ctx, `UPDATE files SET state = $3, owner = '', lease_until = NULL, not_before = $4,
				error_class = $5, reason = $6, bytes = $7, rate = $8, mode = $9, started = $10, ended = $11
			WHERE job_id = $1 AND idx = $2`,
			a.Job, a.Index, next, nb, a.ErrorClass, a.Message, a.Bytes, rate(a), a.Mode, opt(a.Start), opt(a.End)); err != nil {
			return err
		}
		if !next.Final() {
			return nil
		}
		return settle(ctx, tx, a.Job)
	})
	if err != nil {
		return fmt.Errorf("finish %s/%d by %s: %w", a.Job, a.Index, owner, err)
	}
	return nil
}

// rate is an attempt's throughput in MB/s (0 when it took no time).
func rate(a store.Attempt) float64 {
	d := a.End.Sub(a.Start).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(a.Bytes) / 1e6 / d
}

// settle moves a job whose files are all final to its end state. It
// locks the job before it counts: two finishers of a job's last files
// then count one after the other, and the second sees the first's file
// final (each statement of a READ COMMITTED transaction sees what was
// committed before it began), so one of them always settles the job.
func settle(ctx context.Context, tx pgx.Tx, id string) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR NO KEY UPDATE`, id); err != nil {
		return err
	}
	var open, finished, total int
	if err := tx.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state IN ('SUBMITTED', 'ACTIVE')),
			count(*) FILTER (WHERE state = 'FINISHED'),
			count(*)
		FROM files WHERE job_id = $1`, id).Scan(&open, &finished, &total); err != nil {
		return err
	}
	if open > 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE jobs SET state = $2, updated = $3 WHERE id = $1 AND state IN ('SUBMITTED', 'ACTIVE')`,
		id, store.Outcome(finished, total), utc(time.Now()))
	return err
}

// Expire implements store.Store.
func (s *Store) Expire(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// Lock the expired files nobody else holds (one being finished,
		// or expired by another instance, is theirs), then, in statements
		// that see them as locked, record the lost attempts and hand the
		// files back.
		rows, err := tx.Query(ctx, `SELECT job_id, idx FROM files
			WHERE state = 'ACTIVE' AND lease_until < $1
			ORDER BY job_id, idx FOR NO KEY UPDATE SKIP LOCKED`, utc(now))
		if err != nil {
			return err
		}
		var jobs []string
		var idxs []int32
		for rows.Next() {
			var j string
			var i int32
			if err := rows.Scan(&j, &i); err != nil {
				rows.Close()
				return err
			}
			jobs, idxs = append(jobs, j), append(idxs, i)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		n = len(jobs)
		if n == 0 {
			return nil
		}
		const expired = `(SELECT * FROM unnest($1::text[], $2::integer[]) AS k (job_id, idx))`
		if _, err := tx.Exec(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
				source, destination, mode, bytes, error_class, message)
			SELECT f.job_id, f.idx, f.attempts, f.owner, f.started, $3, '', f.destination, '', 0, $4,
				'lease held by ' || f.owner || ' ran out at ' || f.lease_until
			FROM files f WHERE (f.job_id, f.idx) IN `+expired,
			jobs, idxs, utc(now), store.ClassLeaseExpired); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE files SET state = 'SUBMITTED', not_before = NULL,
				error_class = $4, reason = 'lease held by ' || owner || ' ran out at ' || lease_until,
				owner = '', lease_until = NULL, ended = $3
			WHERE (job_id, idx) IN `+expired,
			jobs, idxs, utc(now), store.ClassLeaseExpired)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("expire leases: %w", err)
	}
	return n, nil
}

// Decide implements store.Store.
func (s *Store) Decide(ctx context.Context, d store.Decision) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO decisions (link, time, active, rate, success, reason)
		VALUES ($1, $2, $3, $4, $5, $6)`, d.Link, utc(d.Time), d.Active, d.Rate, d.Success, d.Reason); err != nil {
		return fmt.Errorf("record decision on %s: %w", d.Link, err)
	}
	return nil
}

// Decisions implements store.Store.
func (s *Store) Decisions(ctx context.Context, link string, limit int) ([]store.Decision, error) {
	if limit <= 0 {
		limit = 100
	}
	q, args := `SELECT link, time, active, rate, success, reason FROM decisions
		ORDER BY time DESC, id DESC LIMIT $1`, []any{limit}
	if link != "" {
		q, args = `SELECT link, time, active, rate, success, reason FROM decisions WHERE link = $2
			ORDER BY time DESC, id DESC LIMIT $1`, []any{limit, link}
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("decisions on %q: %w", link, err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Decision, error) {
		var d store.Decision
		err := r.Scan(&d.Link, &d.Time, &d.Active, &d.Rate, &d.Success, &d.Reason)
		d.Time = d.Time.UTC()
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("decisions on %q: %w", link, err)
	}
	return ds, nil
}

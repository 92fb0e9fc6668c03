package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Links implements store.Store.
func (s *Store) Links(ctx context.Context, now time.Time) ([]store.LinkLoad, error) {
	ls := []store.LinkLoad{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		return each(ctx, tx, func(r *sql.Rows) error {
			var l store.LinkLoad
			err := r.Scan(&l.Link, &l.Queued, &l.Active)
			ls = append(ls, l)
			return err
		}, `SELECT link,
				sum(CASE WHEN state = ?1 AND not_before <= ?3 THEN 1 ELSE 0 END) AS queued,
				sum(CASE WHEN state = ?2 THEN 1 ELSE 0 END) AS active
			FROM files WHERE state IN (?1, ?2)
			GROUP BY link HAVING queued + active > 0 ORDER BY link`,
			store.FileSubmitted, store.FileActive, ts(now))
	})
	if err != nil {
		return nil, fmt.Errorf("links: %w", err)
	}
	return ls, nil
}

// LinkStorages implements store.Store.
func (s *Store) LinkStorages(ctx context.Context) (map[string][2]string, error) {
	m := map[string][2]string{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		return each(ctx, tx, func(r *sql.Rows) error {
			var l, sse, dse string
			err := r.Scan(&l, &sse, &dse)
			m[l] = [2]string{sse, dse}
			return err
		}, `SELECT link, min(source_se), min(dest_se) FROM files WHERE state IN ('SUBMITTED', 'ACTIVE') GROUP BY link`)
	})
	if err != nil {
		return nil, fmt.Errorf("link storages: %w", err)
	}
	return m, nil
}

// Claim implements store.Store.
//
// The order (priority, then fair share, then age) is worked out here
// rather than in one SQL statement: ranking every claimable file of the
// link with a window function costs a sort of the whole queue per claim,
// while the queue's (priority, submitter) groups come from an index scan
// and each group's oldest files from an index range.
func (s *Store) Claim(ctx context.Context, owner, link string, n int, now time.Time, lease time.Duration) ([]store.File, error) {
	if n <= 0 {
		return []store.File{}, nil
	}
	claimed := []store.File{}
	err := s.write(ctx, func(tx *wtx) error {
		claimed = claimed[:0]
		keys, err := claimOrder(ctx, tx, link, ts(now), n)
		if err != nil {
			return err
		}
		jobs := map[string]bool{}
		var f0 store.File // scratch for the destination token
		for _, k := range keys {
			var srcTok string
			f, err := scanFile(tx.QueryRowContext(ctx, `UPDATE files SET state = 'ACTIVE', owner = ?, lease_until = ?,
					attempts = attempts + 1, started = ?, ended = ''
				WHERE job_id = ? AND idx = ? RETURNING `+fileCols+`, src_tokens, dst_token`,
				owner, ts(now.Add(lease)), ts(now), k.Job, k.Index), &srcTok, &f0.DestToken)
			if err != nil {
				return err
			}
			if f.SourceTokens, err = store.ParseTokens(srcTok); err != nil {
				return fmt.Errorf("file %s/%d: %w", k.Job, k.Index, err)
			}
			f.DestToken, f0.DestToken = f0.DestToken, ""
			claimed = append(claimed, f)
			if !jobs[k.Job] {
				jobs[k.Job] = true
				if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'ACTIVE', updated = ? WHERE id = ? AND state = 'SUBMITTED'`,
					ts(now), k.Job); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim on %s for %s: %w", link, owner, err)
	}
	return claimed, nil
}

// claimOrder picks up to n claimable files of link at now, in claim
// order (store.ClaimOrder).
func claimOrder(ctx context.Context, tx querier, link, now string, n int) ([]store.FileKey, error) {
	shares := map[string]int{}
	err := each(ctx, tx, func(r *sql.Rows) error {
		var sub string
		var c int
		err := r.Scan(&sub, &c)
		shares[sub] = c
		return err
	}, `SELECT submitter, count(*) FROM files WHERE state = 'ACTIVE' AND link = ? GROUP BY submitter`, link)
	if err != nil {
		return nil, err
	}
	// The (priority, submitter) groups with files to claim, highest
	// priority first: one index seek per group (a skip scan), where
	// SELECT DISTINCT would read every queued file of the link.
	var groups []*store.ClaimGroup
	prevP, prevS := math.MaxInt32, ""
	for {
		// The next submitter down in this priority, else the first of
		// the next priority down. (The row value (priority, submitter)
		// < (?, ?) reads the same but makes SQLite walk every file of
		// the group just passed.)
		g := &store.ClaimGroup{}
		err := tx.QueryRowContext(ctx, `SELECT priority, submitter FROM files
			WHERE state = 'SUBMITTED' AND link = ? AND not_before <= ? AND priority = ? AND submitter < ?
			ORDER BY submitter DESC LIMIT 1`, link, now, prevP, prevS).Scan(&g.Priority, &g.Submitter)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRowContext(ctx, `SELECT priority, submitter FROM files
				WHERE state = 'SUBMITTED' AND link = ? AND not_before <= ? AND priority < ?
				ORDER BY priority DESC, submitter DESC LIMIT 1`, link, now, prevP).Scan(&g.Priority, &g.Submitter)
		}
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
		prevP, prevS = g.Priority, g.Submitter
	}
	return store.ClaimOrder(groups, shares, n, func(g *store.ClaimGroup, max int) error {
		return each(ctx, tx, func(r *sql.Rows) error {
			var c store.Candidate
			err := r.Scan(&c.Key.Job, &c.Key.Index, &c.Age)
			g.Files = append(g.Files, c)
			return err
		}, `SELECT job_id, idx, submitted FROM files
			WHERE state = 'SUBMITTED' AND link = ? AND priority = ? AND submitter = ? AND not_before <= ?
			ORDER BY submitted, job_id, idx LIMIT ?`, link, g.Priority, g.Submitter, now, max)
	})
}

// each runs query and calls fn on each row.
func each(ctx context.Context, tx querier, fn func(*sql.Rows) error, query string, args ...any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, owner string, files []store.FileKey, now time.Time, lease time.Duration) ([]store.FileKey, error) {
	lost := []store.FileKey{}
	err := s.write(ctx, func(tx *wtx) error {
		lost = lost[:0]
		for _, k := range files {
			res, err := tx.ExecContext(ctx, `UPDATE files SET lease_until = ?
				WHERE job_id = ? AND idx = ? AND state = 'ACTIVE' AND owner = ?`, ts(now.Add(lease)), k.Job, k.Index, owner)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
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
	return store.FinishOne(ctx, s.FinishAll, owner, a, next, notBefore)
}

// FinishAll implements store.Store.
func (s *Store) FinishAll(ctx context.Context, owner string, outs []store.Ending) ([]error, error) {
	if err := store.CheckEndings(outs); err != nil {
		return nil, err
	}
	errs := make([]error, len(outs))
	err := s.write(ctx, func(tx *wtx) error {
		return store.FinishEach(nil, errs, func(i int) error { return finishOne(ctx, tx, owner, outs[i]) })
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d attempts by %s: %w", len(outs), owner, err)
	}
	return errs, nil
}

// finishOne records one outcome, or refuses it before writing anything.
func finishOne(ctx context.Context, tx *wtx, owner string, o store.Ending) error {
	a, next := o.Attempt, o.Next
	var f store.File
	var holder, started, src, typ string
	err := tx.QueryRowContext(ctx, `SELECT state, owner, attempts, started, sources, destination, source_index, tried,
			link, source_se, dest_se, (SELECT job_type FROM jobs WHERE id = files.job_id)
		FROM files WHERE job_id = ? AND idx = ?`,
		a.Job, a.Index).Scan(&f.State, &holder, &f.Attempts, &started, &src, &f.Destination, &f.SourceIndex, &f.Tried,
		&f.Link, &f.SourceSE, &f.DestSE, &typ)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	if f.State != store.FileActive || holder != owner || (a.N != 0 && a.N != f.Attempts) {
		return store.ErrLeaseLost
	}
	if o.Advance {
		if err := json.Unmarshal([]byte(src), &f.Sources); err != nil {
			return fmt.Errorf("file %s/%d: stored sources: %w", a.Job, a.Index, err)
		}
	}
	a.N, a.Owner = f.Attempts, owner
	if a.Start.IsZero() {
		if a.Start, err = parseTS(started); err != nil {
			return err
		}
	}
	if a.End.IsZero() {
		a.End = time.Now()
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
			source, destination, mode, bytes, error_class, message)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.Job, a.Index, a.N, a.Owner, ts(a.Start), ts(a.End), a.Source, a.Destination,
		a.Mode, a.Bytes, a.ErrorClass, a.Message); err != nil {
		return err
	}
	f = store.Moved(f, o)
	if next == store.FileSubmitted {
		var held bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM bans WHERE se IN (?, ?) AND status <> 'CANCEL')`,
			f.SourceSE, f.DestSE).Scan(&held); err != nil {
			return err
		}
		if held {
			next = store.FileOnHold
		}
	}
	tokens := "src_tokens"
	if next.Final() {
		tokens = "''" // a secret kept no longer than needed
	}
	if _, err := tx.ExecContext(ctx, `UPDATE files SET state = ?, owner = '', lease_until = '', not_before = ?,
			error_class = ?, reason = ?, bytes = ?, rate = ?, mode = ?, started = ?, ended = ?,
			source_index = ?, tried = ?, link = ?, source_se = ?,
			src_tokens = `+tokens+`, dst_token = CASE WHEN ? THEN '' ELSE dst_token END
		WHERE job_id = ? AND idx = ?`,
		next, notBeforeTS(next, o.NotBefore), a.ErrorClass, a.Message, a.Bytes, rate(a), a.Mode, ts(a.Start), ts(a.End),
		f.SourceIndex, f.Tried, f.Link, f.SourceSE, next.Final(),
		a.Job, a.Index); err != nil {
		return err
	}
	if next == store.FileFinished && typ == store.TypeMultihop {
		// The next hop may start (files after a NOT_USED one are
		// NOT_USED too: only the next one moves).
		if _, err := tx.ExecContext(ctx, `UPDATE files SET state = CASE WHEN EXISTS (
				SELECT 1 FROM bans b WHERE b.se IN (files.source_se, files.dest_se) AND b.status <> 'CANCEL')
				THEN 'ON_HOLD' ELSE 'SUBMITTED' END
			WHERE job_id = ? AND idx = ? AND state = 'NOT_USED'`, a.Job, a.Index+1); err != nil {
			return err
		}
	}
	if !next.Final() {
		return nil
	}
	return settle(ctx, tx, a.Job)
}

// notBeforeTS is the stored NotBefore of a file finished to next.
func notBeforeTS(next store.FileState, notBefore time.Time) string {
	if next != store.FileSubmitted {
		return ""
	}
	return ts(notBefore)
}

// rate is an attempt's throughput in MB/s (0 when it took no time).
func rate(a store.Attempt) float64 {
	d := a.End.Sub(a.Start).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(a.Bytes) / 1e6 / d
}

// settle moves a job none of whose files is open any more to its end
// state (store.Outcome).
func settle(ctx context.Context, tx querier, id string) error {
	var open bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (
			SELECT 1 FROM files WHERE job_id = ? AND state IN `+openStates+`)`, id).Scan(&open); err != nil || open {
		return err
	}
	var finished, failed, canceled, total int
	var typ string
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE f.state = 'FINISHED'),
			count(*) FILTER (WHERE f.state = 'FAILED'), count(*) FILTER (WHERE f.state = 'CANCELED'), count(*),
			(SELECT job_type FROM jobs WHERE id = ?1)
		FROM files f WHERE f.job_id = ?1`, id).Scan(&finished, &failed, &canceled, &total, &typ); err != nil {
		return err
	}
	out := store.Outcome(typ, finished, failed, canceled, total)
	now := ts(time.Now())
	_, err := tx.ExecContext(ctx, `UPDATE jobs SET state = ?, reason = ?, updated = ?, finished = ?
		WHERE id = ? AND state NOT IN ('FINISHED', 'FINISHEDDIRTY', 'FAILED', 'CANCELED')`,
		out, store.OutcomeReason(out), now, now, id)
	return err
}

// Expire implements store.Store.
func (s *Store) Expire(ctx context.Context, now time.Time) (int, error) {
	n, err := s.giveBack(ctx, now, `lease_until < ?1`, `'lease held by ' || owner || ' ran out at ' || lease_until`)
	if err != nil {
		return 0, fmt.Errorf("expire leases: %w", err)
	}
	return n, nil
}

// TakeBack implements store.Store.
func (s *Store) TakeBack(ctx context.Context, prefix, self string, now time.Time) (int, error) {
	n, err := s.giveBack(ctx, now, `substr(owner, 1, length(?3)) = ?3 AND owner <> ?4`,
		`'held by ' || owner || ', an earlier run of this instance, taken back when it started again'`, prefix, self)
	if err != nil {
		return 0, fmt.Errorf("take back the files of %s*: %w", prefix, err)
	}
	return n, nil
}

// giveBack hands the ACTIVE files that match where (an expression over
// files, ?1 being now, ?2 the class, args ?3...) back to the queue, their
// lost attempts recorded with class ClassLeaseExpired and the message
// msg (an expression over files).
func (s *Store) giveBack(ctx context.Context, now time.Time, where, msg string, args ...any) (int, error) {
	var n int
	all := append([]any{ts(now), store.ClassLeaseExpired}, args...)
	err := s.write(ctx, func(tx *wtx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
				source, destination, mode, bytes, error_class, message)
			SELECT job_id, idx, attempts, owner, started, ?1, '', destination, '', 0, ?2, `+msg+`
			FROM files WHERE state = 'ACTIVE' AND `+where, all...); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE files SET state = 'SUBMITTED', not_before = '',
				error_class = ?2, reason = `+msg+`,
				owner = '', lease_until = '', ended = ?1
			WHERE state = 'ACTIVE' AND `+where, all...)
		if err != nil {
			return err
		}
		c, err := res.RowsAffected()
		n = int(c)
		return err
	})
	return n, err
}

// Decide implements store.Store.
func (s *Store) Decide(ctx context.Context, d store.Decision) error {
	err := s.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO decisions (link, time, active, rate, success, reason)
			VALUES (?, ?, ?, ?, ?, ?)`, d.Link, ts(d.Time), d.Active, d.Rate, d.Success, d.Reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("record decision on %s: %w", d.Link, err)
	}
	return nil
}

// Decisions implements store.Store.
func (s *Store) Decisions(ctx context.Context, link string, limit int) ([]store.Decision, error) {
	if limit <= 0 {
		limit = 100
	}
	q, args := `SELECT link, time, active, rate, success, reason FROM decisions ORDER BY time DESC, id DESC LIMIT ?`, []any{limit}
	if link != "" {
		q, args = `SELECT link, time, active, rate, success, reason FROM decisions WHERE link = ? ORDER BY time DESC, id DESC LIMIT ?`, []any{link, limit}
	}
	ds := []store.Decision{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		return each(ctx, tx, func(r *sql.Rows) error {
			var d store.Decision
			var t string
			err := r.Scan(&d.Link, &t, &d.Active, &d.Rate, &d.Success, &d.Reason)
			if err == nil {
				d.Time, err = parseTS(t)
			}
			ds = append(ds, d)
			return err
		}, q, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("decisions on %q: %w", link, err)
	}
	return ds, nil
}

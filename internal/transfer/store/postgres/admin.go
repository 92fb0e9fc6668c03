package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Overdue implements store.Store.
func (s *Store) Overdue(ctx context.Context, now time.Time) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx pgx.Tx) error {
		n = 0
		t := utc(now)
		rows, err := tx.Query(ctx, `SELECT id FROM jobs WHERE deadline < $1 AND finished IS NULL
			AND EXISTS (SELECT 1 FROM files WHERE job_id = jobs.id AND state IN ('SUBMITTED', 'ON_HOLD'))
			ORDER BY id`, t)
		if err != nil {
			return err
		}
		jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		const queued = `f.state IN ('SUBMITTED', 'ON_HOLD')`
		for _, id := range jobs {
			if _, err := lockOpen(ctx, tx, id, queued); err != nil {
				return err
			}
			var c int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM files f WHERE f.job_id = $1 AND `+queued, id).Scan(&c); err != nil {
				return err
			}
			n += c
			if err := cancelFiles(ctx, tx, id, t, "not started within the job's max_time_in_queue", queued); err != nil {
				return err
			}
			if err := settle(ctx, tx, id); err != nil {
				return err
			}
		}
		// Files on hold longer than their ban's timeout.
		rows, err = tx.Query(ctx, `SELECT DISTINCT f.job_id, f.idx FROM files f JOIN bans b ON b.se IN (f.source_se, f.dest_se)
			WHERE f.state = 'ON_HOLD' AND b.timeout > 0 AND b.added + make_interval(secs => b.timeout) < $1
			ORDER BY f.job_id, f.idx`, t)
		if err != nil {
			return err
		}
		held, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.FileKey, error) {
			var k store.FileKey
			err := r.Scan(&k.Job, &k.Index)
			return k, err
		})
		if err != nil {
			return err
		}
		for _, k := range held {
			if _, err := lockOpen(ctx, tx, k.Job, "f.idx = $2", k.Index); err != nil {
				return err
			}
			if err := cancelFiles(ctx, tx, k.Job, t, "storage banned: still waiting when the ban's timeout ran out", "f.idx = $5", k.Index); err != nil {
				return err
			}
			n++
		}
		for _, k := range held {
			if err := settle(ctx, tx, k.Job); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("overdue files: %w", err)
	}
	return n, nil
}

// Ban implements store.Store.
func (s *Store) Ban(ctx context.Context, b store.Ban) ([]string, error) {
	var affected []string
	err := s.tx(ctx, func(tx pgx.Tx) error {
		affected = nil
		if _, err := tx.Exec(ctx, `INSERT INTO bans (se, vo, status, message, admin_dn, added, timeout)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (se) DO UPDATE SET vo = excluded.vo, status = excluded.status, message = excluded.message,
				admin_dn = excluded.admin_dn, added = excluded.added, timeout = excluded.timeout`,
			b.SE, b.VO, b.Status, b.Message, b.AdminDN, utc(b.Added), b.Timeout); err != nil {
			return err
		}
		var err error
		if b.Status != store.BanCancel {
			affected, err = hold(ctx, tx, b.SE)
		} else {
			affected, err = banCancel(ctx, tx, b.SE)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ban %s: %w", b.SE, err)
	}
	if affected == nil {
		affected = []string{}
	}
	return affected, nil
}

// hold puts the waiting files of se on hold.
func hold(ctx context.Context, tx pgx.Tx, se string) ([]string, error) {
	rows, err := tx.Query(ctx, `WITH held AS (
			SELECT job_id, idx FROM files WHERE state = 'SUBMITTED' AND (source_se = $1 OR dest_se = $1)
			ORDER BY job_id, idx FOR NO KEY UPDATE SKIP LOCKED
		)
		UPDATE files f SET state = 'ON_HOLD' FROM held h WHERE f.job_id = h.job_id AND f.idx = h.idx
		RETURNING f.job_id`, se)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(ids)
	return slices.Compact(ids), err
}

// banCancel cancels the open and NOT_USED files of se, or moves them on
// to another source.
func banCancel(ctx context.Context, tx pgx.Tx, se string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT se FROM bans WHERE status = 'CANCEL'`)
	if err != nil {
		return nil, err
	}
	bl, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT `+fileCols+` FROM files f
		WHERE f.state IN ('SUBMITTED', 'READY', 'ACTIVE', 'ON_HOLD', 'NOT_USED') AND (f.source_se = $1 OR f.dest_se = $1)
		ORDER BY f.job_id, f.idx FOR NO KEY UPDATE`, se)
	if err != nil {
		return nil, err
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.File, error) { return scanFile(r) })
	if err != nil {
		return nil, err
	}
	now := utc(time.Now())
	reason := "storage " + se + " banned"
	var affected []string
	for _, f := range fs {
		if len(affected) == 0 || affected[len(affected)-1] != f.Job {
			affected = append(affected, f.Job)
		}
		to, cancel := store.BanMove(f, se, func(s string) bool { return slices.Contains(bl, s) })
		switch {
		case cancel && f.State == store.FileNotUsed:
			_, err = tx.Exec(ctx, `UPDATE files SET state = 'CANCELED', reason = $3, error_class = $4, src_tokens = '', dst_token = ''
				WHERE job_id = $1 AND idx = $2`, f.Job, f.Index, reason, store.ClassCanceled)
		case cancel:
			err = cancelFiles(ctx, tx, f.Job, now, reason, "f.idx = $5", f.Index)
		default:
			// The attempt in flight, if any, ends; the file waits on its next source.
			if _, err = tx.Exec(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
					source, destination, mode, bytes, error_class, message)
				SELECT job_id, idx, attempts, owner, started, $3, '', destination, '', 0, $4, $5
				FROM files WHERE job_id = $1 AND idx = $2 AND state = 'ACTIVE'`, f.Job, f.Index, now, store.ClassCanceled, reason); err != nil {
				return nil, err
			}
			m := store.Moved(f, store.Ending{Next: store.FileSubmitted, Advance: true, To: to})
			_, err = tx.Exec(ctx, `UPDATE files SET state = 'SUBMITTED', owner = '', lease_until = NULL, not_before = NULL,
					source_index = $3, tried = $4, link = $5, source_se = $6, error_class = $7, reason = $8,
					ended = CASE WHEN state = 'ACTIVE' THEN $9 ELSE ended END
				WHERE job_id = $1 AND idx = $2`, f.Job, f.Index, m.SourceIndex, m.Tried, m.Link, m.SourceSE,
				store.ClassCanceled, reason, now)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, id := range affected {
		if err := settle(ctx, tx, id); err != nil {
			return nil, err
		}
	}
	return affected, nil
}

// Unban implements store.Store.
func (s *Store) Unban(ctx context.Context, se string) ([]string, error) {
	var affected []string
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := execSome(ctx, tx, `DELETE FROM bans WHERE se = $1`, se); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE files SET state = 'SUBMITTED'
			WHERE state = 'ON_HOLD' AND (source_se = $1 OR dest_se = $1)
				AND NOT EXISTS (SELECT 1 FROM bans b WHERE b.se IN (files.source_se, files.dest_se))
			RETURNING job_id`, se)
		if err != nil {
			return err
		}
		affected, err = pgx.CollectRows(rows, pgx.RowTo[string])
		slices.Sort(affected)
		affected = slices.Compact(affected)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("unban %s: %w", se, err)
	}
	if affected == nil {
		affected = []string{}
	}
	return affected, nil
}

// Bans implements store.Store.
func (s *Store) Bans(ctx context.Context) ([]store.Ban, error) {
	rows, err := s.pool.Query(ctx, `SELECT se, vo, status, message, admin_dn, added, timeout FROM bans ORDER BY se`)
	if err != nil {
		return nil, fmt.Errorf("bans: %w", err)
	}
	bs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Ban, error) {
		var b store.Ban
		err := r.Scan(&b.SE, &b.VO, &b.Status, &b.Message, &b.AdminDN, &b.Added, &b.Timeout)
		b.Added = b.Added.UTC()
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("bans: %w", err)
	}
	if bs == nil {
		bs = []store.Ban{}
	}
	return bs, nil
}

// SetSEConfig implements store.Store.
func (s *Store) SetSEConfig(ctx context.Context, c store.SEConfig) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO se_config (se, info, operations) VALUES ($1, $2, $3)
		ON CONFLICT (se) DO UPDATE SET info = excluded.info, operations = excluded.operations`,
		c.SE, jsonOr(c.Info), jsonOr(c.Operations)); err != nil {
		return fmt.Errorf("configure %s: %w", c.SE, err)
	}
	return nil
}

// jsonOr is raw, or {} when empty.
func jsonOr(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	return string(raw)
}

// DeleteSEConfig implements store.Store.
func (s *Store) DeleteSEConfig(ctx context.Context, se string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM se_config WHERE se = $1`, se)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete configuration of %s: %w", se, err)
	}
	return nil
}

// SEConfigs implements store.Store.
func (s *Store) SEConfigs(ctx context.Context) ([]store.SEConfig, error) {
	rows, err := s.pool.Query(ctx, `SELECT se, info, operations FROM se_config ORDER BY se`)
	if err != nil {
		return nil, fmt.Errorf("storage configurations: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SEConfig, error) {
		var c store.SEConfig
		var info, ops []byte
		err := r.Scan(&c.SE, &info, &ops)
		c.Info, c.Operations = info, ops
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("storage configurations: %w", err)
	}
	if cs == nil {
		cs = []store.SEConfig{}
	}
	return cs, nil
}

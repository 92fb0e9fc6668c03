package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Overdue implements store.Store. It looks first, in a read: the
// scheduler asks every second, and a write transaction each time would
// take the one writer from the claims and finishes for nothing.
func (s *Store) Overdue(ctx context.Context, now time.Time) (int, error) {
	var due bool
	err := s.read(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE deadline <> '' AND deadline < ?1 AND finished = '')
			OR EXISTS (SELECT 1 FROM bans WHERE timeout > 0)`, ts(now)).Scan(&due)
	})
	if err != nil || !due {
		return 0, err
	}
	n := 0
	err = s.write(ctx, func(tx *wtx) error {
		n = 0
		t := ts(now)
		var jobs []string
		err := each(ctx, tx, func(r *sql.Rows) error {
			var id string
			err := r.Scan(&id)
			jobs = append(jobs, id)
			return err
		}, `SELECT id FROM jobs WHERE deadline <> '' AND deadline < ? AND finished = ''
			AND EXISTS (SELECT 1 FROM files WHERE job_id = jobs.id AND state IN ('SUBMITTED', 'ON_HOLD'))`, t)
		if err != nil {
			return err
		}
		for _, id := range jobs {
			c, err := countWhere(ctx, tx, id, `state IN ('SUBMITTED', 'ON_HOLD')`)
			if err != nil {
				return err
			}
			n += c
			if err := cancelFiles(ctx, tx, id, t, "not started within the job's max_time_in_queue", `state IN ('SUBMITTED', 'ON_HOLD')`); err != nil {
				return err
			}
			if err := settle(ctx, tx, id); err != nil {
				return err
			}
		}
		// Files on hold longer than their ban's timeout.
		var held []store.FileKey
		err = each(ctx, tx, func(r *sql.Rows) error {
			var k store.FileKey
			err := r.Scan(&k.Job, &k.Index)
			held = append(held, k)
			return err
		}, `SELECT f.job_id, f.idx FROM files f JOIN bans b ON b.se IN (f.source_se, f.dest_se)
			WHERE f.state = 'ON_HOLD' AND b.timeout > 0
				AND CAST(strftime('%s', b.added) AS INTEGER) + b.timeout < CAST(strftime('%s', ?) AS INTEGER)
			ORDER BY f.job_id, f.idx`, t)
		if err != nil {
			return err
		}
		held = slices.Compact(held)
		for _, k := range held {
			if err := cancelFiles(ctx, tx, k.Job, t, "storage banned: still waiting when the ban's timeout ran out", "idx = ?", k.Index); err != nil {
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

// countWhere counts the files of job id that where selects.
func countWhere(ctx context.Context, tx querier, id, where string) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM files WHERE job_id = ? AND `+where, id).Scan(&n)
	return n, err
}

// Ban implements store.Store.
func (s *Store) Ban(ctx context.Context, b store.Ban) ([]string, error) {
	var affected []string
	err := s.write(ctx, func(tx *wtx) error {
		affected = affected[:0]
		if _, err := tx.ExecContext(ctx, `INSERT INTO bans (se, vo, status, message, admin_dn, added, timeout)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (se) DO UPDATE SET vo = excluded.vo, status = excluded.status, message = excluded.message,
				admin_dn = excluded.admin_dn, added = excluded.added, timeout = excluded.timeout`,
			b.SE, b.VO, b.Status, b.Message, b.AdminDN, ts(b.Added), b.Timeout); err != nil {
			return err
		}
		if b.Status != store.BanCancel {
			return hold(ctx, tx, b.SE, &affected)
		}
		return banCancel(ctx, tx, b.SE, &affected)
	})
	if err != nil {
		return nil, fmt.Errorf("ban %s: %w", b.SE, err)
	}
	return affected, nil
}

// hold puts the waiting files of se on hold.
func hold(ctx context.Context, tx querier, se string, affected *[]string) error {
	err := each(ctx, tx, func(r *sql.Rows) error {
		var id string
		err := r.Scan(&id)
		*affected = append(*affected, id)
		return err
	}, `SELECT DISTINCT job_id FROM files WHERE state = 'SUBMITTED' AND (source_se = ?1 OR dest_se = ?1) ORDER BY job_id`, se)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE files SET state = 'ON_HOLD' WHERE state = 'SUBMITTED' AND (source_se = ?1 OR dest_se = ?1)`, se)
	return err
}

// banCancel cancels the open and NOT_USED files of se, or moves them on
// to another source.
func banCancel(ctx context.Context, tx querier, se string, affected *[]string) error {
	banned := map[string]bool{}
	err := each(ctx, tx, func(r *sql.Rows) error {
		var b string
		err := r.Scan(&b)
		banned[b] = true
		return err
	}, `SELECT se FROM bans WHERE status = 'CANCEL'`)
	if err != nil {
		return err
	}
	var fs []store.File
	err = each(ctx, tx, func(r *sql.Rows) error {
		f, err := scanFile(r)
		fs = append(fs, f)
		return err
	}, `SELECT `+fileCols+` FROM files
		WHERE state IN ('SUBMITTED', 'READY', 'ACTIVE', 'ON_HOLD', 'NOT_USED') AND (source_se = ?1 OR dest_se = ?1)
		ORDER BY job_id, idx`, se)
	if err != nil {
		return err
	}
	now := ts(time.Now())
	reason := "storage " + se + " banned"
	for _, f := range fs {
		if len(*affected) == 0 || (*affected)[len(*affected)-1] != f.Job {
			*affected = append(*affected, f.Job)
		}
		to, cancel := store.BanMove(f, se, func(s string) bool { return banned[s] })
		if cancel {
			if f.State == store.FileNotUsed {
				if _, err := tx.ExecContext(ctx, `UPDATE files SET state = 'CANCELED', reason = ?, error_class = ?,
						src_tokens = '', dst_token = '' WHERE job_id = ? AND idx = ?`,
					reason, store.ClassCanceled, f.Job, f.Index); err != nil {
					return err
				}
				continue
			}
			if err := cancelFiles(ctx, tx, f.Job, now, reason, "idx = ?", f.Index); err != nil {
				return err
			}
			continue
		}
		// The attempt in flight, if any, ends; the file waits on its next source.
		if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (job_id, idx, n, owner, started, ended,
				source, destination, mode, bytes, error_class, message)
			SELECT job_id, idx, attempts, owner, started, ?, '', destination, '', 0, ?, ?
			FROM files WHERE job_id = ? AND idx = ? AND state = 'ACTIVE'`, now, store.ClassCanceled, reason, f.Job, f.Index); err != nil {
			return err
		}
		m := store.Moved(f, store.Ending{Next: store.FileSubmitted, Advance: true, To: to})
		if _, err := tx.ExecContext(ctx, `UPDATE files SET state = 'SUBMITTED', owner = '', lease_until = '', not_before = '',
				source_index = ?, tried = ?, link = ?, source_se = ?, error_class = ?, reason = ?,
				ended = CASE WHEN state = 'ACTIVE' THEN ? ELSE ended END
			WHERE job_id = ? AND idx = ?`, m.SourceIndex, m.Tried, m.Link, m.SourceSE, store.ClassCanceled, reason, now,
			f.Job, f.Index); err != nil {
			return err
		}
	}
	for _, id := range *affected {
		if err := settle(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

// Unban implements store.Store.
func (s *Store) Unban(ctx context.Context, se string) ([]string, error) {
	var affected []string
	err := s.write(ctx, func(tx *wtx) error {
		affected = affected[:0]
		if err := execSome(ctx, tx, `DELETE FROM bans WHERE se = ?`, se); err != nil {
			return err
		}
		const free = `state = 'ON_HOLD' AND (source_se = ?1 OR dest_se = ?1)
			AND NOT EXISTS (SELECT 1 FROM bans b WHERE b.se IN (files.source_se, files.dest_se))`
		err := each(ctx, tx, func(r *sql.Rows) error {
			var id string
			err := r.Scan(&id)
			affected = append(affected, id)
			return err
		}, `SELECT DISTINCT job_id FROM files WHERE `+free+` ORDER BY job_id`, se)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE files SET state = 'SUBMITTED' WHERE `+free, se)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("unban %s: %w", se, err)
	}
	return affected, nil
}

// Bans implements store.Store.
func (s *Store) Bans(ctx context.Context) ([]store.Ban, error) {
	bs := []store.Ban{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		return each(ctx, tx, func(r *sql.Rows) error {
			var b store.Ban
			var added string
			err := r.Scan(&b.SE, &b.VO, &b.Status, &b.Message, &b.AdminDN, &added, &b.Timeout)
			if err == nil {
				b.Added, err = parseTS(added)
			}
			bs = append(bs, b)
			return err
		}, `SELECT se, vo, status, message, admin_dn, added, timeout FROM bans ORDER BY se`)
	})
	if err != nil {
		return nil, fmt.Errorf("bans: %w", err)
	}
	return bs, nil
}

// SetSEConfig implements store.Store.
func (s *Store) SetSEConfig(ctx context.Context, c store.SEConfig) error {
	info, ops := jsonOr(c.Info), jsonOr(c.Operations)
	err := s.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO se_config (se, info, operations) VALUES (?, ?, ?)
			ON CONFLICT (se) DO UPDATE SET info = excluded.info, operations = excluded.operations`, c.SE, info, ops)
		return err
	})
	if err != nil {
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
	err := s.write(ctx, func(tx *wtx) error {
		return execSome(ctx, tx, `DELETE FROM se_config WHERE se = ?`, se)
	})
	if err != nil {
		return fmt.Errorf("delete configuration of %s: %w", se, err)
	}
	return nil
}

// SEConfigs implements store.Store.
func (s *Store) SEConfigs(ctx context.Context) ([]store.SEConfig, error) {
	cs := []store.SEConfig{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		return each(ctx, tx, func(r *sql.Rows) error {
			var c store.SEConfig
			var info, ops string
			err := r.Scan(&c.SE, &info, &ops)
			c.Info, c.Operations = json.RawMessage(info), json.RawMessage(ops)
			cs = append(cs, c)
			return err
		}, `SELECT se, info, operations FROM se_config ORDER BY se`)
	})
	if err != nil {
		return nil, fmt.Errorf("storage configurations: %w", err)
	}
	return cs, nil
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// PutDelegationRequest implements store.Delegations.
func (s *Store) PutDelegationRequest(ctx context.Context, r store.DelegationRequest, stale time.Time, max int) error {
	err := s.write(ctx, func(tx *wtx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM delegation_requests WHERE created < ?`, ts(stale)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM credentials WHERE expires < ?`, ts(r.Created)); err != nil {
			return err
		}
		var others int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM delegation_requests WHERE NOT (dlg_id = ? AND dn = ?)`,
			r.ID, r.DN).Scan(&others); err != nil {
			return err
		}
		if others >= max {
			return store.ErrFull
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO delegation_requests (dlg_id, dn, request, priv_key, created) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (dlg_id, dn) DO UPDATE SET request = excluded.request, priv_key = excluded.priv_key, created = excluded.created`,
			r.ID, r.DN, string(r.Request), string(r.Key), ts(r.Created))
		return err
	})
	if err != nil {
		return fmt.Errorf("store a delegation request of %s: %w", r.ID, err)
	}
	return nil
}

// DelegationRequest implements store.Delegations.
func (s *Store) DelegationRequest(ctx context.Context, id, dn string) (store.DelegationRequest, error) {
	r := store.DelegationRequest{ID: id, DN: dn}
	err := s.read(ctx, func(tx *sql.Tx) error {
		var req, key, created string
		err := tx.QueryRowContext(ctx, `SELECT request, priv_key, created FROM delegation_requests WHERE dlg_id = ? AND dn = ?`,
			id, dn).Scan(&req, &key, &created)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		r.Request, r.Key = []byte(req), []byte(key)
		r.Created, err = parseTS(created)
		return err
	})
	if err != nil {
		return store.DelegationRequest{}, fmt.Errorf("delegation request of %s: %w", id, err)
	}
	return r, nil
}

// PutCredential implements store.Delegations.
func (s *Store) PutCredential(ctx context.Context, c store.Credential) error {
	err := s.write(ctx, func(tx *wtx) error {
		if err := execSome(ctx, tx, `DELETE FROM delegation_requests WHERE dlg_id = ? AND dn = ? AND priv_key = ?`,
			c.ID, c.DN, string(c.Key)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO credentials (dlg_id, dn, chain, priv_key, fqans, expires, stored) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (dlg_id, dn) DO UPDATE SET chain = excluded.chain, priv_key = excluded.priv_key, fqans = excluded.fqans,
				expires = excluded.expires, stored = excluded.stored`,
			c.ID, c.DN, string(c.Chain), string(c.Key), strings.Join(c.FQANs, "\n"), ts(c.Expires), ts(c.Stored))
		return err
	})
	if err != nil {
		return fmt.Errorf("store the credential of %s: %w", c.ID, err)
	}
	return nil
}

// Credential implements store.Delegations.
func (s *Store) Credential(ctx context.Context, id, dn string) (store.Credential, error) {
	c := store.Credential{ID: id, DN: dn}
	err := s.read(ctx, func(tx *sql.Tx) error {
		var chain, key, fqans, expires, stored string
		err := tx.QueryRowContext(ctx, `SELECT chain, priv_key, fqans, expires, stored FROM credentials WHERE dlg_id = ? AND dn = ?`,
			id, dn).Scan(&chain, &key, &fqans, &expires, &stored)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		c.Chain, c.Key, c.FQANs = []byte(chain), []byte(key), store.SplitFQANs(fqans)
		if c.Expires, err = parseTS(expires); err != nil {
			return err
		}
		c.Stored, err = parseTS(stored)
		return err
	})
	if err != nil {
		return store.Credential{}, fmt.Errorf("credential of %s: %w", id, err)
	}
	return c, nil
}

// DeleteCredential implements store.Delegations.
func (s *Store) DeleteCredential(ctx context.Context, id, dn string) error {
	err := s.write(ctx, func(tx *wtx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM delegation_requests WHERE dlg_id = ? AND dn = ?`, id, dn); err != nil {
			return err
		}
		return execSome(ctx, tx, `DELETE FROM credentials WHERE dlg_id = ? AND dn = ?`, id, dn)
	})
	if err != nil {
		return fmt.Errorf("delete the credential of %s: %w", id, err)
	}
	return nil
}

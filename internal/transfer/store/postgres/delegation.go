package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// delegationLock serializes the puts of pending requests between
// instances, so that their bound holds ("wanda delegation", folded to
// eight bytes).
const delegationLock = 0x77616e6464656c67

// PutDelegationRequest implements store.Delegations.
func (s *Store) PutDelegationRequest(ctx context.Context, r store.DelegationRequest, stale time.Time, max int) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(delegationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM delegation_requests WHERE created < $1`, utc(stale)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM credentials WHERE expires < $1`, utc(r.Created)); err != nil {
			return err
		}
		var others int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM delegation_requests WHERE NOT (dlg_id = $1 AND dn = $2)`,
			r.ID, r.DN).Scan(&others); err != nil {
			return err
		}
		if others >= max {
			return store.ErrFull
		}
		_, err := tx.Exec(ctx, `INSERT INTO delegation_requests (dlg_id, dn, request, priv_key, created) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (dlg_id, dn) DO UPDATE SET request = excluded.request, priv_key = excluded.priv_key, created = excluded.created`,
			r.ID, r.DN, string(r.Request), string(r.Key), utc(r.Created))
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
	var req, key string
	err := s.pool.QueryRow(ctx, `SELECT request, priv_key, created FROM delegation_requests WHERE dlg_id = $1 AND dn = $2`,
		id, dn).Scan(&req, &key, &r.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.DelegationRequest{}, fmt.Errorf("delegation request of %s: %w", id, err)
	}
	r.Request, r.Key, r.Created = []byte(req), []byte(key), r.Created.UTC()
	return r, nil
}

// PutCredential implements store.Delegations.
func (s *Store) PutCredential(ctx context.Context, c store.Credential) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := execSome(ctx, tx, `DELETE FROM delegation_requests WHERE dlg_id = $1 AND dn = $2 AND priv_key = $3`,
			c.ID, c.DN, string(c.Key)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO credentials (dlg_id, dn, chain, priv_key, fqans, expires, stored) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (dlg_id, dn) DO UPDATE SET chain = excluded.chain, priv_key = excluded.priv_key, fqans = excluded.fqans,
				expires = excluded.expires, stored = excluded.stored`,
			c.ID, c.DN, string(c.Chain), string(c.Key), strings.Join(c.FQANs, "\n"), utc(c.Expires), utc(c.Stored))
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
	var chain, key, fqans string
	err := s.pool.QueryRow(ctx, `SELECT chain, priv_key, fqans, expires, stored FROM credentials WHERE dlg_id = $1 AND dn = $2`,
		id, dn).Scan(&chain, &key, &fqans, &c.Expires, &c.Stored)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Credential{}, fmt.Errorf("credential of %s: %w", id, err)
	}
	c.Chain, c.Key, c.FQANs = []byte(chain), []byte(key), store.SplitFQANs(fqans)
	c.Expires, c.Stored = c.Expires.UTC(), c.Stored.UTC()
	return c, nil
}

// DeleteCredential implements store.Delegations.
func (s *Store) DeleteCredential(ctx context.Context, id, dn string) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM delegation_requests WHERE dlg_id = $1 AND dn = $2`, id, dn); err != nil {
			return err
		}
		return execSome(ctx, tx, `DELETE FROM credentials WHERE dlg_id = $1 AND dn = $2`, id, dn)
	})
	if err != nil {
		return fmt.Errorf("delete the credential of %s: %w", id, err)
	}
	return nil
}

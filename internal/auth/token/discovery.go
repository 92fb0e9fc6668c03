package token

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"
)

// refreshLoop keeps one issuer's keys fresh: a load at start, then one
// every Refresh, sooner when Verify met an unknown kid (issuer.refetch).
// After a failure it retries from firstBackoff, doubling up to Refresh.
// A failure never drops keys already loaded: an issuer's outage, however
// long, only delays its rotations.
func (v *Verifier) refreshLoop(is *issuer) {
	defer v.wg.Done()
	var backoff time.Duration
	for {
		wait := v.cfg.Refresh
		if err := v.refresh(is); err != nil {
			backoff = min(max(2*backoff, firstBackoff), v.cfg.Refresh)
			wait = backoff
			v.log.Warn("token issuer keys not refreshed", "issuer", is.cfg.URL,
				"err", err, "keys", len(is.keys.Load().kids()), "retry_in", wait)
		} else {
			backoff = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-v.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-is.kick:
			t.Stop()
		}
	}
}

// refresh loads an issuer's keys by OpenID Connect discovery.
func (v *Verifier) refresh(is *issuer) error {
	ks, err := v.discover(v.ctx, is.cfg.URL)
	if err != nil {
		if v.ctx.Err() == nil {
			is.setErr(err)
		}
		return err
	}
	old := is.keys.Load()
	is.setKeys(ks)
	if kids := ks.kids(); !slices.Equal(kids, old.kids()) {
		v.log.Info("token issuer keys loaded", "issuer", is.cfg.URL, "kids", kids)
	}
	return nil
}

// discover fetches <iss>/.well-known/openid-configuration, then the JWKS
// at its jwks_uri.
func (v *Verifier) discover(ctx context.Context, iss string) (*keySet, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	body, err := v.get(ctx, issuerKey(iss)+"/.well-known/openid-configuration")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("discovery document: %w", err)
	}
	// OpenID Connect Discovery 1.0, 4.3: the document must name the
	// issuer it was fetched for.
	if issuerKey(doc.Issuer) != issuerKey(iss) {
		return nil, fmt.Errorf("discovery document names issuer %q", doc.Issuer)
	}
	u, err := url.Parse(doc.JWKSURI)
	if err != nil {
		return nil, fmt.Errorf("jwks_uri: %w", err)
	}
	if err := checkFetchURL(u); err != nil {
		return nil, fmt.Errorf("jwks_uri: %w", err)
	}
	body, err = v.get(ctx, u.String())
	if err != nil {
		return nil, err
	}
	return parseJWKS(body)
}

// get reads a JSON document of at most maxDocBytes.
func (v *Verifier) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxDocBytes {
		return nil, fmt.Errorf("GET %s: response over %d bytes", u, maxDocBytes)
	}
	return body, nil
}

// loadJWKSFile reads an offline issuer's keys.
func loadJWKSFile(name string) (*keySet, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDocBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxDocBytes {
		return nil, fmt.Errorf("%s: over %d bytes", name, maxDocBytes)
	}
	ks, err := parseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return ks, nil
}

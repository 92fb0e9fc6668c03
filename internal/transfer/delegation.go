package transfer

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// FTS3's X.509 proxy delegation (fts-rest-flask's delegation
// controller), as fts-rest-delegate, fts-rest-transfer-submit --cert and
// fts3.rest.client.easy.delegate drive it:
//
//	GET    /delegation/ID             {"termination_time": ..., "voms_attrs": [...]} or null
//	GET    /delegation/ID/request     a PEM certificate request; its key stays here
//	PUT    /delegation/ID/credential  the request signed by the user (the proxy, then its chain): 201
//	POST   /delegation/ID/credential  the same
//	DELETE /delegation/ID             the proxy forgotten: 204
//	POST   /delegation/ID/voms        VOMS attributes added by the service: 424, it talks to no VOMS server
//
// ID is the caller's delegation id (GET /whoami); another one is
// refused (403). Only certificate users delegate (403 for tokens: their
// jobs move with their tokens). A job a certificate user submits
// through FTS3's API needs a proxy delegated with an hour left (419
// otherwise, as FTS3) and moves with it (delegated.go).

// Delegation limits (Options may change them).
const (
	// defaultPendingTTL is how long a request waits for its proxy.
	defaultPendingTTL = 15 * time.Minute
	// defaultMaxPending bounds the requests pending at once.
	defaultMaxPending = 1000
	// maxProxyBody bounds a PUT of a proxy and its chain.
	maxProxyBody = 64 << 10
	// minDelegationLeft is the least lifetime a proxy must have left for a
	// submission (FTS3's hour).
	minDelegationLeft = time.Hour
)

// CertVerifier verifies a certificate chain (leaf first) as the API's
// authentication does: the identity it establishes, and when it ends.
type CertVerifier func(chain []*x509.Certificate) (Identity, time.Time, error)

func (s *Service) routeDelegation(mux *http.ServeMux, auth Authenticator) {
	mux.Handle("GET /delegation/{dlg}", s.serve(auth, s.ftsDelegation))
	mux.Handle("DELETE /delegation/{dlg}", s.serve(auth, s.ftsUndelegate))
	mux.Handle("GET /delegation/{dlg}/request", s.serve(auth, s.ftsDelegationRequest))
	mux.Handle("PUT /delegation/{dlg}/credential", s.serve(auth, s.ftsDelegate))
	mux.Handle("POST /delegation/{dlg}/credential", s.serve(auth, s.ftsDelegate))
	mux.Handle("POST /delegation/{dlg}/voms", s.serve(auth, s.ftsDelegationVOMS))
}

// ownDelegation refuses a request about another identity's delegation,
// and (cert) one not made with a certificate.
func ownDelegation(r *http.Request, id Identity, cert bool) error {
	if cert && id.Method != "certificate" {
		return &apiError{code: http.StatusForbidden, msg: "Certificate required: only X.509 users delegate a proxy (token users' jobs move with their tokens)"}
	}
	if r.PathValue("dlg") != id.DelegationID {
		return &apiError{code: http.StatusForbidden, msg: "The requested ID and the credentials ID do not match"}
	}
	return nil
}

// GET /delegation/{id}: the end of the delegated proxy, or null.
func (s *Service) ftsDelegation(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := ownDelegation(r, id, false); err != nil {
		return err
	}
	if id.Method != "certificate" {
		writeFTS(w, http.StatusOK, nil)
		return nil
	}
	c, err := s.st.Credential(r.Context(), id.DelegationID, id.DN)
	if errors.Is(err, store.ErrNotFound) {
		writeFTS(w, http.StatusOK, nil)
		return nil
	}
	if err != nil {
		return err
	}
	attrs := c.FQANs
	if attrs == nil {
		attrs = []string{}
	}
	writeFTS(w, http.StatusOK, object{{"termination_time", ftsTimeOf(c.Expires)}, {"voms_attrs", attrs}})
	return nil
}

// GET /delegation/{id}/request: a certificate request for the caller to
// sign. A request still pending (and of the caller's key size) is given
// again, as FTS3 does; else a new key is made.
func (s *Service) ftsDelegationRequest(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := ownDelegation(r, id, true); err != nil {
		return err
	}
	var peer []*x509.Certificate
	if r.TLS != nil {
		peer = r.TLS.PeerCertificates
	}
	bits, now := requestBits(peer), s.now()
	pending, err := s.st.DelegationRequest(r.Context(), id.DelegationID, id.DN)
	switch {
	case err == nil && now.Sub(pending.Created) < s.pendingTTL()/2 && requestBitsOf(pending.Request) == bits:
		// Half its time left at least: the signer has time.
	case err == nil, errors.Is(err, store.ErrNotFound):
		if pending, err = s.newRequest(r.Context(), id, bits); err != nil {
			return err
		}
	default:
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Delegation-ID", id.DelegationID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(pending.Request)
	return nil
}

// newRequest makes and stores a request for id (a few at a time: a key
// costs a CPU for a while).
func (s *Service) newRequest(ctx context.Context, id Identity, bits int) (store.DelegationRequest, error) {
	select {
	case s.dlg.keygen <- struct{}{}:
	case <-ctx.Done():
		return store.DelegationRequest{}, ctx.Err()
	}
	req, key, err := newProxyRequest(bits)
	<-s.dlg.keygen
	if err != nil {
		return store.DelegationRequest{}, err
	}
	if key, err = s.dlg.seal(id.DelegationID, id.DN, key); err != nil {
		return store.DelegationRequest{}, err
	}
	now := s.now()
	pending := store.DelegationRequest{ID: id.DelegationID, DN: id.DN, Request: req, Key: key, Created: now}
	err = s.st.PutDelegationRequest(ctx, pending, now.Add(-s.pendingTTL()), s.maxPending())
	if errors.Is(err, store.ErrFull) {
		return store.DelegationRequest{}, &apiError{code: http.StatusServiceUnavailable,
			msg: fmt.Sprintf("%d delegations are pending: try again in a few minutes", s.maxPending())}
	}
	if err != nil {
		return store.DelegationRequest{}, err
	}
	s.log.Info("delegation request made", "dlg_id", id.DelegationID, "dn", id.DN, "bits", bits)
	return pending, nil
}

// PUT /delegation/{id}/credential: the signed proxy, then its chain. It
// must carry the key of the request pending, verify (a CA the service
// trusts, every proxy signed by the certificate after it, none expired)
// and be the caller's (the same DN and VOMS attributes, hence the same
// delegation id). Nothing is stored otherwise.
func (s *Service) ftsDelegate(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := ownDelegation(r, id, true); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxProxyBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &apiError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("a proxy and its chain take less than %d bytes", maxProxyBody)}
	case err != nil:
		return badRequest("reading the proxy: %v", err)
	}
	ctx := r.Context()
	pending, err := s.st.DelegationRequest(ctx, id.DelegationID, id.DN)
	if errors.Is(err, store.ErrNotFound) || err == nil && s.now().Sub(pending.Created) > s.pendingTTL() {
		return badRequest("No credential cache found: no certificate request of yours is pending (GET /delegation/%s/request first; a request waits %s)", id.DelegationID, s.pendingTTL())
	}
	if err != nil {
		return err
	}
	chain, err := parseChain(body)
	if err != nil {
		return badRequest("Could not process the proxy: %v", err)
	}
	keyPEM, err := s.dlg.open(id.DelegationID, id.DN, pending.Key)
	if err != nil {
		return err
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return err
	}
	if !matchesKey(chain[0], key) {
		return badRequest("Could not process the proxy: The proxy does not match the stored associated private key (it must be the request of GET /delegation/%s/request, signed)", id.DelegationID)
	}
	if s.o.VerifyCert == nil {
		return &apiError{code: http.StatusForbidden, msg: "this service verifies no certificates"}
	}
	who, expires, err := s.o.VerifyCert(chain)
	if err != nil {
		return badRequest("Could not process the proxy: %v", err)
	}
	if who.DN != id.DN || who.DelegationID != id.DelegationID {
		return badRequest("Could not process the proxy: it is %s's (delegation id %s), not yours: sign the request with your own proxy or certificate", who.DN, who.DelegationID)
	}
	now := s.now()
	if !expires.After(now) {
		return badRequest("Could not process the proxy: it expired at %s", ftsTimeOf(expires))
	}
	c := store.Credential{ID: id.DelegationID, DN: id.DN, Chain: encodeChain(chain), Key: pending.Key, FQANs: who.FQANs, Expires: expires, Stored: now}
	if err := s.st.PutCredential(ctx, c); errors.Is(err, store.ErrNotFound) {
		return badRequest("Could not process the proxy: its request is no longer pending (another delegation took or replaced it): delegate again")
	} else if err != nil {
		return err
	}
	s.dlg.forget(id.DelegationID)
	s.log.Info("proxy delegated", "dlg_id", id.DelegationID, "dn", id.DN, "fqans", who.FQANs, "expires", expires)
	w.WriteHeader(http.StatusCreated)
	return nil
}

// DELETE /delegation/{id}: forget the proxy (jobs not started yet fail
// without it).
func (s *Service) ftsUndelegate(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := ownDelegation(r, id, true); err != nil {
		return err
	}
	err := s.st.DeleteCredential(r.Context(), id.DelegationID, id.DN)
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{code: http.StatusNotFound, msg: "Delegated credentials not found"}
	}
	if err != nil {
		return err
	}
	s.dlg.forget(id.DelegationID)
	s.log.Info("delegated proxy removed", "dlg_id", id.DelegationID, "dn", id.DN)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// POST /delegation/{id}/voms ["vo", "vo:/vo/Role=x"]: FTS3 runs
// voms-proxy-init on the delegated proxy; this service talks to no VOMS
// server, so it answers as FTS3 does when that fails (424), with what
// to do instead.
func (s *Service) ftsDelegationVOMS(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := ownDelegation(r, id, true); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var cmds []string
	if err := json.Unmarshal(body, &cmds); err != nil {
		return badRequest("Expecting a list of strings")
	}
	c, err := s.st.Credential(r.Context(), id.DelegationID, id.DN)
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{code: http.StatusNotFound, msg: "Delegated credentials not found"}
	}
	if err != nil {
		return err
	}
	if !c.Expires.After(s.now()) {
		return &apiError{code: http.StatusForbidden, msg: "Delegated proxy already expired"}
	}
	return &apiError{code: http.StatusFailedDependency, msg: "this service asks no VOMS server for attributes: make a VOMS proxy " +
		"(voms-proxy-init --voms " + strconv.Quote(firstVO(cmds)) + ") and delegate it; its attributes go with it"}
}

// firstVO is the VO of the first voms command ("vo" or "vo:/vo/Role=x").
func firstVO(cmds []string) string {
	if len(cmds) == 0 {
		return "VO"
	}
	for i, r := range cmds[0] {
		if r == ':' {
			return cmds[0][:i]
		}
	}
	return cmds[0]
}

// needDelegation refuses a certificate user's submission without a
// proxy delegated that has an hour left, as FTS3 does (419: its clients
// say "Need delegation").
func (s *Service) needDelegation(ctx context.Context, id Identity) error {
	if id.Method != "certificate" {
		return nil
	}
	c, err := s.st.Credential(ctx, id.DelegationID, id.DN)
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{code: statusAuthenticationTimeout, msg: fmt.Sprintf("No delegation found for %q (fts-rest-delegate, or submit with fts-rest-transfer-submit, delegates one)", id.DN)}
	}
	if err != nil {
		return err
	}
	left := c.Expires.Sub(s.now())
	switch {
	case left <= 0:
		return &apiError{code: statusAuthenticationTimeout, msg: fmt.Sprintf("The delegated credentials expired %d seconds ago (%s)", int(-left.Seconds()), id.DelegationID)}
	case left < minDelegationLeft:
		return &apiError{code: statusAuthenticationTimeout, msg: fmt.Sprintf("The delegated credentials has less than one hour left (%s)", id.DelegationID)}
	}
	return nil
}

// statusAuthenticationTimeout is FTS3's 419: delegate (again).
const statusAuthenticationTimeout = 419

func (s *Service) pendingTTL() time.Duration {
	if s.o.Delegation.PendingTTL > 0 {
		return s.o.Delegation.PendingTTL
	}
	return defaultPendingTTL
}

func (s *Service) maxPending() int {
	if s.o.Delegation.MaxPending > 0 {
		return s.o.Delegation.MaxPending
	}
	return defaultMaxPending
}

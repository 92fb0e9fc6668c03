package transfer

import (
	"crypto/sha1"
	"encoding/hex"
	"net/http"

	"github.com/google/uuid"
)

// Identity is who makes an API request, as the app authenticated it and
// as FTS3 names it (GET /whoami).
type Identity struct {
	// Key is the owner of the jobs submitted: "issuer#subject" for a
	// token, the DN for a certificate, "anonymous" without credentials.
	Key string
	// DN is FTS3's user_dn: the token's subject, the certificate's DN,
	// "anon".
	DN string
	// VOs are the identity's VOs (wlcg.groups, VOMS FQANs' VOs, the
	// issuer's host name; a certificate without VOMS gets its
	// delegation id, as FTS3's "virtual VO").
	VOs []string
	// Method is "oauth2", "certificate" or "unauthenticated".
	Method string
	// DelegationID is FTS3's: a hash of the DN and FQANs, or of the
	// token's issuer and subject.
	DelegationID string
	// FQANs are the VOMS attributes, or a token's scopes.
	FQANs []string
	// Token is the bearer token the request carried when it authenticated
	// it (FTS3 uses it for the files of a submission that name no
	// tokens). A secret: never logged, never returned.
	Token string
	// Admin may ban storages and configure them.
	Admin bool
}

// Anonymous is the identity of a request on a service without
// authentication.
func Anonymous() Identity {
	return Identity{Key: "anonymous", DN: "anon", VOs: []string{"anonymous"}, Method: "unauthenticated", DelegationID: "anonymous", Admin: true}
}

// VO is the identity's first VO, FTS3's vo_name of its jobs.
func (id Identity) VO() string {
	if len(id.VOs) == 0 {
		return "nil"
	}
	return id.VOs[0]
}

// DelegationID is FTS3's delegation id of parts (a DN and its FQANs, or
// a token's issuer and subject): the first 16 hex digits of their SHA-1.
func DelegationID(parts ...string) string {
	h := sha1.New()
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// BaseID is the root of deterministic job ids (GET /whoami's base_id):
// a job submitted with id_generator "deterministic" and sid S by a
// member of VO V gets uuid5(uuid5(BaseID, V), S), as FTS3 makes them,
// so that a client (Rucio) can compute it beforehand.
var BaseID = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/wanda-fed/wanda/transfer"))

// DeterministicID is the id of a job submitted with sid by a member of
// vo.
func DeterministicID(vo, sid string) string {
	return uuid.NewSHA1(uuid.NewSHA1(BaseID, []byte(vo)), []byte(sid)).String()
}

// Authenticator tells who makes a request; an error refuses it (401,
// the error's text as the reason).
type Authenticator func(*http.Request) (Identity, error)

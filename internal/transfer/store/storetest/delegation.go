package storetest

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// testDelegation: a pending request is kept per (id, DN) and replaced;
// a credential is stored only against the key of the request pending,
// which it consumes; stale requests and expired credentials go at the
// next request; the bound on pending requests counts other identities;
// delete removes the credential and any request.
func testDelegation(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	const id, dn = "0123456789abcdef", "/DC=org/DC=example/CN=Alice"
	if _, err := s.DelegationRequest(ctx, id, dn); err != nil {
		wantErr(t, "request before any", err, store.ErrNotFound)
	} else {
		t.Fatal("a request before any was put")
	}
	_, err := s.Credential(ctx, id, dn)
	wantErr(t, "credential before any", err, store.ErrNotFound)
	wantErr(t, "delete before any", s.DeleteCredential(ctx, id, dn), store.ErrNotFound)

	r1 := store.DelegationRequest{ID: id, DN: dn, Request: []byte("REQ 1"), Key: []byte("KEY 1"), Created: t0}
	if err := s.PutDelegationRequest(ctx, r1, t0.Add(-time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	r2 := r1
	r2.Request, r2.Key, r2.Created = []byte("REQ 2"), []byte("KEY 2"), t0.Add(time.Second)
	if err := s.PutDelegationRequest(ctx, r2, t0.Add(-time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	got, err := s.DelegationRequest(ctx, id, dn)
	if err != nil || string(got.Request) != "REQ 2" || string(got.Key) != "KEY 2" {
		t.Fatalf("the request replaced: %q %q %v", got.Request, got.Key, err)
	}
	sameTime(t, "request created", got.Created, r2.Created)
	if _, err := s.DelegationRequest(ctx, id, "/DC=org/DC=example/CN=Mallory"); err == nil {
		t.Error("another DN's request under the same id")
	}

	// The key of the replaced request does not store a credential.
	c := store.Credential{ID: id, DN: dn, Chain: []byte("CHAIN"), Key: []byte("KEY 1"), FQANs: []string{"/dteam/Role=NULL/Capability=NULL", "/dteam/x"},
		Expires: t0.Add(12 * time.Hour), Stored: t0.Add(2 * time.Second)}
	wantErr(t, "a credential with a replaced request's key", s.PutCredential(ctx, c), store.ErrNotFound)
	if _, err := s.Credential(ctx, id, dn); err == nil {
		t.Fatal("a credential stored with the key of a replaced request")
	}
	c.Key = []byte("KEY 2")
	if err := s.PutCredential(ctx, c); err != nil {
		t.Fatal(err)
	}
	gc, err := s.Credential(ctx, id, dn)
	if err != nil || !bytes.Equal(gc.Chain, c.Chain) || !bytes.Equal(gc.Key, c.Key) || !slices.Equal(gc.FQANs, c.FQANs) {
		t.Fatalf("credential: %+v %v", gc, err)
	}
	sameTime(t, "expires", gc.Expires, c.Expires)
	sameTime(t, "stored", gc.Stored, c.Stored)
	_, err = s.DelegationRequest(ctx, id, dn)
	wantErr(t, "the request after its credential", err, store.ErrNotFound)
	wantErr(t, "the same credential again", s.PutCredential(ctx, c), store.ErrNotFound)

	// The bound counts the others' requests; stale ones go first.
	for i, who := range []string{"/CN=b", "/CN=c"} {
		r := store.DelegationRequest{ID: "id-" + who, DN: who, Request: []byte("R"), Key: []byte("K"), Created: t0.Add(time.Duration(i) * time.Minute)}
		if err := s.PutDelegationRequest(ctx, r, t0.Add(-time.Hour), 2); err != nil {
			t.Fatalf("request %d of 2: %v", i, err)
		}
	}
	late := t0.Add(2 * time.Minute)
	d := store.DelegationRequest{ID: "id-d", DN: "/CN=d", Request: []byte("R"), Key: []byte("K"), Created: late}
	wantErr(t, "a third request with a bound of 2", s.PutDelegationRequest(ctx, d, t0.Add(-time.Hour), 2), store.ErrFull)
	if _, err := s.DelegationRequest(ctx, "id-d", "/CN=d"); err == nil {
		t.Error("a refused request was stored")
	}
	again := store.DelegationRequest{ID: "id-/CN=c", DN: "/CN=c", Request: []byte("R2"), Key: []byte("K2"), Created: late}
	if err := s.PutDelegationRequest(ctx, again, t0.Add(-time.Hour), 2); err != nil {
		t.Errorf("replacing one's own request at the bound: %v", err)
	}
	// b's request (created at t0) is stale by t0+30s: d fits.
	if err := s.PutDelegationRequest(ctx, d, t0.Add(30*time.Second), 2); err != nil {
		t.Fatalf("after a stale request went: %v", err)
	}
	if _, err := s.DelegationRequest(ctx, "id-/CN=b", "/CN=b"); err == nil {
		t.Error("a stale request stayed")
	}
	// A request after the credential's end removes it.
	e := store.DelegationRequest{ID: "id-e", DN: "/CN=e", Request: []byte("R"), Key: []byte("K"), Created: c.Expires.Add(time.Second)}
	if err := s.PutDelegationRequest(ctx, e, c.Expires, 10); err != nil {
		t.Fatal(err)
	}
	_, err = s.Credential(ctx, id, dn)
	wantErr(t, "an expired credential after a request", err, store.ErrNotFound)

	// Delete takes the credential and any pending request.
	r3 := store.DelegationRequest{ID: id, DN: dn, Request: []byte("REQ 3"), Key: []byte("KEY 3"), Created: c.Expires}
	if err := s.PutDelegationRequest(ctx, r3, c.Expires.Add(-time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	c.Key, c.Expires = r3.Key, c.Expires.Add(24*time.Hour)
	if err := s.PutCredential(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDelegationRequest(ctx, r3, c.Expires.Add(-48*time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCredential(ctx, id, dn); err != nil {
		t.Fatal(err)
	}
	_, err = s.Credential(ctx, id, dn)
	wantErr(t, "credential after delete", err, store.ErrNotFound)
	_, err = s.DelegationRequest(ctx, id, dn)
	wantErr(t, "request after delete", err, store.ErrNotFound)
}

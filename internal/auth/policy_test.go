package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/auth/token"
)

const (
	issA = "https://issuer-a.example"
	issB = "https://issuer-b.example"
	aud  = "https://site.example"
)

// site is a policy over real token verification with offline keys.
type site struct {
	keyA, keyB *token.Key
	tokens     *token.Verifier
}

func newSite(t testing.TB) *site {
	t.Helper()
	s := &site{}
	var err error
	if s.keyA, err = token.GenerateKey("ES256", "a1"); err != nil {
		t.Fatal(err)
	}
	if s.keyB, err = token.GenerateKey("RS256", "b1"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, k *token.Key) string {
		b, err := token.JWKS(k)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s.tokens, err = token.New(token.Config{
		Issuers: []token.Issuer{
			{URL: issA, BasePath: "/store", JWKSFile: write("a.jwks", s.keyA)},
			{URL: issB, BasePath: "/", JWKSFile: write("b.jwks", s.keyB)},
		},
		Audiences: []string{aud},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.tokens.Close)
	return s
}

func (s *site) tok(t testing.TB, k *token.Key, iss, scope string, extra map[string]any) string {
	t.Helper()
	now := time.Now()
	c := map[string]any{"iss": iss, "sub": "alice", "aud": aud, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "wlcg.ver": "1.0", "scope": scope}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := k.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestPolicy(t *testing.T) {
	s := newSite(t)
	p := &auth.Policy{
		Exports: []auth.ExportRule{{Prefix: "/store"}, {Prefix: "/ro", ReadOnly: true}, {Prefix: "/public"}},
		Tokens:  s.tokens,
		Rules: []auth.Rule{
			{Prefix: "/", AnonymousRead: false},
			{Prefix: "/public", AnonymousRead: true, Modify: []string{"group:/cms/ops"}},
			{Prefix: "/store", Issuers: []string{issA}},
			{Prefix: "/store/group", Create: []string{"group:/cms"}, Read: []string{"group:/cms"}},
		},
	}
	readAll := s.tok(t, s.keyA, issA, "storage.read:/", nil)
	createAlice := s.tok(t, s.keyA, issA, "storage.read:/ storage.create:/user/alice", nil)
	modifyAlice := s.tok(t, s.keyA, issA, "storage.modify:/user/alice", nil)
	fromB := s.tok(t, s.keyB, issB, "storage.modify:/", nil)
	cms := s.tok(t, s.keyB, issB, "openid", map[string]any{"wlcg.groups": []string{"/cms"}})
	ops := s.tok(t, s.keyB, issB, "openid", map[string]any{"wlcg.groups": []string{"/cms/ops"}})
	expired := s.tok(t, s.keyA, issA, "storage.read:/", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})

	cases := []struct {
		name   string
		op     auth.Op
		path   string
		bearer string
		want   error // nil, ErrUnauthenticated, ErrForbidden, ErrCreateOnly
		msg    string
	}{
		{"anonymous read public", auth.Read, "/public/f", "", nil, ""},
		{"anonymous read store", auth.Read, "/store/f", "", auth.ErrUnauthenticated, "a credential is needed (a token with storage.read)"},
		{"anonymous write public", auth.Write, "/public/f", "", auth.ErrUnauthenticated, "storage.create or storage.modify"},
		{"read scope", auth.Read, "/store/data/f", readAll, nil, ""},
		{"read scope list", auth.List, "/store", readAll, nil, ""},
		{"read scope cannot write", auth.Write, "/store/data/f", readAll, auth.ErrForbidden, "does not grant storage.create:/data/f"},
		{"create new", auth.Write, "/store/user/alice/f", createAlice, auth.ErrCreateOnly, "storage.modify:/user/alice/f"},
		{"create mkdir", auth.Mkdir, "/store/user/alice/d", createAlice, nil, ""},
		{"create cannot delete", auth.Delete, "/store/user/alice/f", createAlice, auth.ErrForbidden, "storage.modify:/user/alice/f"},
		{"create prefix confusion", auth.Write, "/store/user/alicefoo/f", createAlice, auth.ErrForbidden, ""},
		{"create outside", auth.Write, "/store/user/bob/f", createAlice, auth.ErrForbidden, ""},
		{"modify writes", auth.Write, "/store/user/alice/f", modifyAlice, nil, ""},
		{"modify deletes", auth.Delete, "/store/user/alice/f", modifyAlice, nil, ""},
		{"modify moves", auth.Move, "/store/user/alice/f", modifyAlice, nil, ""},
		{"modify not outside", auth.Delete, "/store/user/bob/f", modifyAlice, auth.ErrForbidden, ""},
		{"modify does not read", auth.Read, "/store/user/alice/f", modifyAlice, auth.ErrForbidden, "storage.read:/user/alice/f"},
		{"issuer not honoured under /store", auth.Write, "/store/x", fromB, auth.ErrForbidden, ""},
		{"issuer B honoured at /", auth.Write, "/public/x", fromB, nil, ""},
		{"group may create", auth.Write, "/store/group/f", cms, auth.ErrCreateOnly, ""},
		{"group may read", auth.Read, "/store/group/f", cms, nil, ""},
		{"group no modify", auth.Delete, "/store/group/f", cms, auth.ErrForbidden, ""},
		{"subgroup is not group", auth.Read, "/store/group/f", ops, auth.ErrForbidden, ""},
		{"ops group modifies public", auth.Delete, "/public/f", ops, nil, ""},
		{"read-only export first", auth.Write, "/ro/f", fromB, auth.ErrForbidden, "read-only"},
		{"expired token", auth.Read, "/public/f", expired, auth.ErrUnauthenticated, "invalid token: token expired"},
		{"garbage token", auth.Read, "/public/f", "not.a.token", auth.ErrUnauthenticated, "invalid token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := p.Authorize(context.Background(), auth.Request{Op: c.op, Path: c.path, Bearer: c.bearer})
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if c.want == auth.ErrForbidden && errors.Is(err, auth.ErrCreateOnly) && c.want != auth.ErrCreateOnly {
				t.Fatalf("create-only where a plain refusal was expected: %v", err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("message %q lacks %q", err, c.msg)
			}
			if c.bearer != "" && strings.Contains(err.Error(), c.bearer) {
				t.Fatal("the token is in the message")
			}
			if errors.Is(err, auth.ErrUnauthenticated) && auth.ChallengeOf(err) == "" {
				t.Fatal("401 without a challenge")
			}
		})
	}
}

func TestPolicyChallenge(t *testing.T) {
	s := newSite(t)
	p := &auth.Policy{Tokens: s.tokens, Rules: []auth.Rule{{Prefix: "/"}}}
	wrongAud := s.tok(t, s.keyA, issA, "storage.read:/", map[string]any{"aud": "https://other.example"})
	err := p.Authorize(context.Background(), auth.Request{Op: auth.Read, Path: "/store/f", Bearer: wrongAud})
	if got, want := auth.ChallengeOf(err), `Bearer error="invalid_token", error_description="wrong audience"`; got != want {
		t.Fatalf("challenge %q, want %q", got, want)
	}
	readOnly := s.tok(t, s.keyA, issA, "storage.read:/", nil)
	err = p.Authorize(context.Background(), auth.Request{Op: auth.Delete, Path: "/store/f", Bearer: readOnly})
	if got, want := auth.ChallengeOf(err), `Bearer error="insufficient_scope", scope="storage.modify:/f"`; got != want {
		t.Fatalf("challenge %q, want %q (%v)", got, want, err)
	}
}

func TestPolicyOpen(t *testing.T) {
	p := &auth.Policy{Exports: []auth.ExportRule{{Prefix: "/store"}, {Prefix: "/ro", ReadOnly: true}}}
	if !p.Open() {
		t.Fatal("not open")
	}
	if err := p.Authorize(context.Background(), auth.Request{Op: auth.Write, Path: "/store/f"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Authorize(context.Background(), auth.Request{Op: auth.Write, Path: "/ro/f"}); !errors.Is(err, auth.ErrForbidden) {
		t.Fatal(err)
	}
}

func BenchmarkPolicyCachedToken(b *testing.B) {
	s := newSite(b)
	p := &auth.Policy{Tokens: s.tokens, Rules: []auth.Rule{{Prefix: "/"}}}
	raw := s.tok(b, s.keyA, issA, "storage.read:/", nil)
	req := auth.Request{Op: auth.Read, Path: "/store/data/f", Bearer: raw}
	if err := p.Authorize(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Authorize(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// Moving or deleting a directory needs the rights of every stricter rule
// below it (else a subtree could be moved out of its rule).
func TestPolicySubtreeRules(t *testing.T) {
	s := newSite(t)
	p := &auth.Policy{Tokens: s.tokens, Rules: []auth.Rule{{Prefix: "/"}, {Prefix: "/store/higgs", Issuers: []string{}}}}
	modify := s.tok(t, s.keyA, issA, "storage.modify:/", nil)
	for _, op := range []auth.Op{auth.Move, auth.Delete} {
		if err := p.Authorize(context.Background(), auth.Request{Op: op, Path: "/store", Bearer: modify}); !errors.Is(err, auth.ErrForbidden) {
			t.Errorf("%v /store over a stricter /store/higgs: %v", op, err)
		}
	}
	if err := p.Authorize(context.Background(), auth.Request{Op: auth.Delete, Path: "/store/other", Bearer: modify}); err != nil {
		t.Errorf("delete beside the stricter rule: %v", err)
	}
}

// A rule's group principals take groups only from the issuers it honours.
func TestPolicyGroupsOfHonouredIssuers(t *testing.T) {
	s := newSite(t)
	p := &auth.Policy{Tokens: s.tokens, Rules: []auth.Rule{{Prefix: "/", Issuers: []string{issA}, Read: []string{"group:/cms"}}}}
	fromB := s.tok(t, s.keyB, issB, "openid", map[string]any{"wlcg.groups": []string{"/cms"}})
	if err := p.Authorize(context.Background(), auth.Request{Op: auth.Read, Path: "/f", Bearer: fromB}); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("group claimed by an issuer the rule does not honour: %v", err)
	}
	fromA := s.tok(t, s.keyA, issA, "openid", map[string]any{"wlcg.groups": []string{"/cms"}})
	if err := p.Authorize(context.Background(), auth.Request{Op: auth.Read, Path: "/f", Bearer: fromA}); err != nil {
		t.Fatalf("group of the honoured issuer: %v", err)
	}
}

func TestRulesBelowAndHidden(t *testing.T) {
	p := &auth.Policy{Rules: []auth.Rule{{Prefix: "/", AnonymousRead: true}, {Prefix: "/store/secret/"}, {Prefix: "/other"}}}
	for dir, want := range map[string]bool{"/": true, "/store": true, "/store/": true, "/store/secret": false, "/store/secret/x": false, "/stor": false, "/storex": false, "/other": false} {
		if got := p.RulesBelow(dir); got != want {
			t.Errorf("RulesBelow(%q) = %v, want %v", dir, got, want)
		}
	}
	if auth.Hidden(t.Context(), p, auth.Request{}, "/other") != nil {
		t.Error("Hidden: a function where no rule lies below")
	}
	hide := auth.Hidden(t.Context(), p, auth.Request{Op: auth.List}, "/store")
	if hide == nil {
		t.Fatal("Hidden: nil above a stricter rule")
	}
	for entry, want := range map[string]bool{"/store/secret": true, "/store/secretive": false, "/store/open": false} {
		if got := hide(entry); got != want {
			t.Errorf("hide(%q) = %v, want %v", entry, got, want)
		}
	}
	if auth.Hidden(t.Context(), auth.AllowAll{}, auth.Request{}, "/") != nil {
		t.Error("Hidden: a function for an authorizer without rules")
	}
}

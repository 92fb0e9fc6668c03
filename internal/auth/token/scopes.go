package token

import (
	"errors"
	"path"
	"strconv"
	"strings"
)

// Right is a storage authorization a scope grants (WLCG Common JWT
// Profile, section "Scope-based authorization").
type Right uint8

// Rights. Modify implies Create and Stage implies Read (Claims.Allows).
const (
	Read Right = iota
	Create
	Modify
	Stage
)

var rightNames = [...]string{"storage.read", "storage.create", "storage.modify", "storage.stage"}

// String is the WLCG scope name, e.g. "storage.read".
func (r Right) String() string {
	if int(r) < len(rightNames) {
		return rightNames[r]
	}
	return "storage.right(" + strconv.Itoa(int(r)) + ")"
}

// implies reports whether a scope of right s grants r: storage.modify may
// also create (the profile says it includes creating new files), and
// storage.stage may also read (staging is reading from nearline).
func (s Right) implies(r Right) bool {
	return s == r || (s == Modify && r == Create) || (s == Stage && r == Read)
}

// Scope is one storage authorization of a token.
type Scope struct {
	Right Right
	Path  string // absolute logical path: the issuer's BasePath joined with the scope's path, cleaned
}

// String is the scope in WLCG form with its absolute logical path, e.g.
// "storage.read:/cms/store" (for messages; the token's own text is
// relative to the issuer's base path).
func (s Scope) String() string { return s.Right.String() + ":" + s.Path }

// covers reports whether the scope's path is p or an ancestor of p, by
// whole path components: "/store" covers "/store/x" but not "/storefoo".
func (s Scope) covers(p string) bool {
	sp := s.Path
	if sp == "/" || p == sp {
		return true
	}
	return len(p) > len(sp) && p[len(sp)] == '/' && p[:len(sp)] == sp
}

// Profiles, the value of Claims.Profile and the profile argument of
// ParseScopes.
const (
	ProfileWLCG      = "wlcg"
	ProfileSciTokens = "scitokens"
)

// ParseScopes parses a space-separated "scope" claim into the storage
// scopes it grants, with paths made absolute under basePath ("" is "/").
//
// Both profiles grant storage.read, storage.create, storage.modify and
// storage.stage (issuers that mint SciTokens often use the WLCG names);
// the SciTokens profile also grants read (Read) and write (Create and
// Modify). A scope without a path means "/". Other scopes (openid,
// offline_access, compute.*, ...) are ignored.
//
// A storage scope whose path is not absolute, has a "." or ".."
// component or a control character is an error (*Error "bad scope"):
// the token is refused as a whole rather than trimmed, since the issuer
// and the server then disagree on what it grants.
func ParseScopes(scope, basePath, profile string) ([]Scope, error) {
	if profile != ProfileWLCG && profile != ProfileSciTokens {
		return nil, errors.New("token: unknown profile " + strconv.Quote(profile))
	}
	base, err := cleanBase(basePath)
	if err != nil {
		return nil, err
	}
	var out []Scope
	for f := range strings.FieldsSeq(scope) {
		name, p, hasPath := strings.Cut(f, ":")
		var rights []Right
		switch name {
		case "storage.read":
			rights = []Right{Read}
		case "storage.create":
			rights = []Right{Create}
		case "storage.modify":
			rights = []Right{Modify}
		case "storage.stage":
			rights = []Right{Stage}
		case "read":
			if profile == ProfileSciTokens {
				rights = []Right{Read}
			}
		case "write":
			if profile == ProfileSciTokens {
				rights = []Right{Create, Modify}
			}
		}
		if rights == nil {
			continue
		}
		abs := base
		if hasPath {
			rel, ok := cleanScopePath(p)
			if !ok {
				return nil, errBadScope
			}
			abs = path.Join(base, rel)
		}
		for _, r := range rights {
			s := Scope{r, abs}
			if !containsScope(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func containsScope(ss []Scope, s Scope) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// cleanScopePath checks a scope's path and drops empty components
// ("//a/" is "/a"). It refuses rather than resolves "." and "..":
// "storage.read:/../etc" must not become a grant on anything.
func cleanScopePath(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	var b strings.Builder
	for c := range strings.SplitSeq(p, "/") {
		switch c {
		case "":
			continue
		case ".", "..":
			return "", false
		}
		for i := 0; i < len(c); i++ {
			if c[i] < 0x20 || c[i] == 0x7f {
				return "", false
			}
		}
		b.WriteByte('/')
		b.WriteString(c)
	}
	if b.Len() == 0 {
		return "/", true
	}
	return b.String(), true
}

// cleanBase checks an issuer's base path: "" is "/", otherwise absolute
// without "." or ".." components; returned cleaned.
func cleanBase(base string) (string, error) {
	if base == "" {
		return "/", nil
	}
	p, ok := cleanScopePath(base)
	if !ok {
		return "", errors.New("token: base path " + strconv.Quote(base) + " must be absolute, without . or .. components")
	}
	return p, nil
}

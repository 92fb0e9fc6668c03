package x509auth

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseGridMap(t *testing.T) {
	m, err := ParseGridMap([]byte(`# a comment
"/DC=org/DC=example/CN=Alice Smith" alice
  "/DC=org/DC=example/CN=Bob" bob,admin , ops
/DC=org/DC=example/CN=Carol	carol
"/DC=org/DC=example/CN=Alice Smith" second
"/DC=org/CN=Quote \"Q\" \\ back" q
"/DC=org/O=A\/B/CN=Jos\xC3\xA9" jose
"/DC=org/CN=Old/Email=old@example.org" old

`))
	if err != nil {
		t.Fatal(err)
	}
	want := GridMap{
		"/DC=org/DC=example/CN=Alice Smith":           {"alice"},
		"/DC=org/DC=example/CN=Bob":                   {"bob", "admin", "ops"},
		"/DC=org/DC=example/CN=Carol":                 {"carol"},
		`/DC=org/CN=Quote "Q" \ back`:                 {"q"},
		`/DC=org/O=A\/B/CN=Jos\xC3\xA9`:               {"jose"},
		"/DC=org/CN=Old/emailAddress=old@example.org": {"old"},
	}
	if !maps.EqualFunc(m, want, slices.Equal) {
		t.Fatalf("got %q\nwant %q", m, want)
	}
	for dn, name := range map[string]string{
		"/DC=org/DC=example/CN=Bob":                   "bob",
		"/DC=org/CN=Old/emailAddress=old@example.org": "old",
		"/DC=org/CN=Old/E=old@example.org":            "old",
		"/DC=org/DC=example/CN=Nobody":                "",
	} {
		if got := m.Name(dn); got != name {
			t.Errorf("Name(%q) = %q, want %q", dn, got, name)
		}
	}
	for in, want := range map[string]string{
		"\"/DC=org/CN=A a\n":       "line 1: unterminated",
		"/DC=org/CN=A\n":           "line 1",
		"# ok\n\"/DC=org/CN=A\"\n": "line 2: no local name",
		"\"/DC=org/CN=A\"a\n":      "line 1: want white space",
		"\"CN=A\" a\n":             "line 1: DN \"CN=A\" is not in OpenSSL's one-line form",
		"\"/DC=org/CN=A\" a b\n":   "line 1: bad local name",
		"\"/DC=org/CN=A\" a,,b\n":  "line 1: bad local name",
		"\"/DC=org/CN=A\" \"a\"\n": "line 1: bad local name",
	} {
		if _, err := ParseGridMap([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// quoteGridMap writes a DN as ParseGridMap reads it back.
func quoteGridMap(dn string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(dn) + `"`
}

func FuzzGridMap(f *testing.F) {
	f.Add([]byte("\"/DC=org/CN=A B\" a\n/DC=org/CN=C c,d\n# x\n"))
	f.Add([]byte("\"unterminated"))
	f.Add([]byte("\"/DC=org/CN=\\\"q\\\\\" a\n\"/O=x/E=m\" b"))
	f.Add([]byte("\"/DC=org/O=A\\/B/CN=Jos\\xC3\\xA9\" jose\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseGridMap(b)
		if err != nil {
			return
		}
		// What was accepted is well formed, and written back it reads
		// the same.
		var out strings.Builder
		for dn, names := range m {
			if !strings.HasPrefix(dn, "/") || len(names) == 0 || normalizeDN(dn) != dn {
				t.Fatalf("accepted %q -> %q", dn, names)
			}
			for _, n := range names {
				if n == "" || strings.ContainsAny(n, " \t\",#") {
					t.Fatalf("accepted name %q", n)
				}
			}
			if strings.ContainsAny(dn, "\r\n") {
				continue // a line break cannot be written back
			}
			fmt.Fprintf(&out, "%s %s\n", quoteGridMap(dn), strings.Join(names, ","))
		}
		m2, err := ParseGridMap([]byte(out.String()))
		if err != nil {
			t.Fatalf("written back: %v\n%s", err, out.String())
		}
		for dn, names := range m2 {
			if !slices.Equal(m[dn], names) {
				t.Fatalf("%q: %q, then %q", dn, m[dn], names)
			}
		}
	})
}

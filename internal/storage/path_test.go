package storage

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	long := strings.Repeat("a", 255)
	tests := []struct {
		in, want string
		err      error
	}{
		{"", "", nil},
		{"/", "", nil},
		{"//", "", nil},
		{".", "", nil},
		{"/./", "", nil},
		{"a", "a", nil},
		{"/a/b/c", "a/b/c", nil},
		{"a/b/", "a/b", nil},
		{"//a///b//", "a/b", nil},
		{"/a/./b/.", "a/b", nil},
		{"/.hidden/..dots/...", ".hidden/..dots/...", nil},
		{"a..b/c..", "a..b/c..", nil},
		{"/with space/ünï/100%", "with space/ünï/100%", nil},
		{"/" + long, long, nil},
		{"..", "", ErrEscapes},
		{"/..", "", ErrEscapes},
		{"/a/../b", "", ErrEscapes},
		{"a/b/..", "", ErrEscapes},
		{"a/../../etc/passwd", "", ErrEscapes},
		{"a\x00b", "", ErrBadPath},
		{`a\b`, "", ErrBadPath},
		{`..\..\x`, "", ErrBadPath},
		{"/" + long + "x", "", ErrBadPath},
		{strings.Repeat("ab/", 1366) + "abcd", "", ErrBadPath}, // 4102 bytes
	}
	for _, tc := range tests {
		got, err := CleanPath(tc.in)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("CleanPath(%.40q) = %q, %v; want %v", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("CleanPath(%.40q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	// 4096 bytes exactly is fine.
	p := strings.Repeat("abc/", 1023) + "abcd"
	if got, err := CleanPath(p); err != nil || got != p {
		t.Errorf("CleanPath of 4096 bytes: %v", err)
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"", "/", "a/b", "/a/../b", "./a//b/", "..", "...", "a\x00", `a\b`, "/é/\xff/", "a/./.", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := CleanPath(in)
		if err != nil {
			if out != "" {
				t.Errorf("CleanPath(%q) = %q with error %v", in, out, err)
			}
			if !errors.Is(err, ErrBadPath) && !errors.Is(err, ErrEscapes) {
				t.Errorf("CleanPath(%q): error %v wraps no sentinel", in, err)
			}
			return
		}
		if strings.HasPrefix(out, "/") || strings.HasSuffix(out, "/") || strings.ContainsAny(out, "\x00\\") {
			t.Fatalf("CleanPath(%q) = %q", in, out)
		}
		if out != "" {
			for _, seg := range strings.Split(out, "/") {
				if seg == "" || seg == "." || seg == ".." || len(seg) > 255 {
					t.Fatalf("CleanPath(%q) = %q: segment %q", in, out, seg)
				}
			}
		}
		if len(out) > len(in) {
			t.Fatalf("CleanPath(%q) = %q grew", in, out)
		}
		if again, err := CleanPath(out); err != nil || again != out {
			t.Fatalf("CleanPath(%q) = %q, but CleanPath(%q) = %q, %v", in, out, out, again, err)
		}
		// What it keeps are the input's own segments, in order.
		var kept []string
		for _, seg := range strings.Split(in, "/") {
			if seg != "" && seg != "." {
				kept = append(kept, seg)
			}
		}
		if strings.Join(kept, "/") != out {
			t.Fatalf("CleanPath(%q) = %q, want %q", in, out, strings.Join(kept, "/"))
		}
		// Join, Base and Dir agree with the cleaned form.
		if out != "" && Join(Dir(out), Base(out)) != out {
			t.Fatalf("Join(Dir, Base) of %q = %q", out, Join(Dir(out), Base(out)))
		}
	})
}

func TestJoinBaseDir(t *testing.T) {
	for _, tc := range []struct{ a, b, join string }{
		{"", "", ""}, {"a", "", "a"}, {"", "b", "b"}, {"a/b", "c", "a/b/c"},
	} {
		if got := Join(tc.a, tc.b); got != tc.join {
			t.Errorf("Join(%q, %q) = %q", tc.a, tc.b, got)
		}
	}
	for _, tc := range []struct{ p, base, dir string }{
		{"", "", ""}, {"a", "a", ""}, {"a/b", "b", "a"}, {"a/b/c", "c", "a/b"},
	} {
		if got := Base(tc.p); got != tc.base {
			t.Errorf("Base(%q) = %q", tc.p, got)
		}
		if got := Dir(tc.p); got != tc.dir {
			t.Errorf("Dir(%q) = %q", tc.p, got)
		}
	}
}

func TestNamespace(t *testing.T) {
	var root, store, mc, user Backend // distinct nil values are enough here
	ns, err := NewNamespace(
		Export{Prefix: "/store", Backend: store},
		Export{Prefix: "/store/mc/", Backend: mc},
		Export{Prefix: "user/data", Backend: user},
	)
	if err != nil {
		t.Fatal(err)
	}
	var prefixes []string
	for _, e := range ns.Exports() {
		prefixes = append(prefixes, e.Prefix)
	}
	if !slices.Equal(prefixes, []string{"user/data", "store/mc", "store"}) {
		t.Errorf("Exports() prefixes = %q, want longest first", prefixes)
	}
	for _, tc := range []struct {
		p, prefix, rel string
		ok             bool
	}{
		{"store", "store", "", true},
		{"store/x", "store", "x", true},
		{"store/mc", "store/mc", "", true},
		{"store/mc/a/b", "store/mc", "a/b", true},
		{"store/mcx", "store", "mcx", true},
		{"storex", "", "", false},
		{"user", "", "", false},
		{"user/data/f", "user/data", "f", true},
		{"", "", "", false},
	} {
		e, rel, ok := ns.Resolve(tc.p)
		if ok != tc.ok || rel != tc.rel || e.Prefix != tc.prefix {
			t.Errorf("Resolve(%q) = %q, %q, %v; want %q, %q, %v", tc.p, e.Prefix, rel, ok, tc.prefix, tc.rel, tc.ok)
		}
	}
	for p, want := range map[string][]string{
		"":          {"store", "user"},
		"user":      {"data"},
		"store":     {"mc"},
		"store/mc":  nil,
		"user/data": nil,
		"nowhere":   nil,
	} {
		if got := ns.Children(p); !slices.Equal(got, want) {
			t.Errorf("Children(%q) = %q, want %q", p, got, want)
		}
	}

	rootNS, err := NewNamespace(Export{Prefix: "/", Backend: root}, Export{Prefix: "/store", Backend: store})
	if err != nil {
		t.Fatal(err)
	}
	if e, rel, ok := rootNS.Resolve("a/b"); !ok || e.Prefix != "" || rel != "a/b" {
		t.Errorf("Resolve under a root export = %q, %q, %v", e.Prefix, rel, ok)
	}
	if e, rel, ok := rootNS.Resolve("store/f"); !ok || e.Prefix != "store" || rel != "f" {
		t.Errorf("Resolve(store/f) = %q, %q, %v", e.Prefix, rel, ok)
	}

	for _, bad := range [][]Export{
		{{Prefix: "/a"}, {Prefix: "a/"}},
		{{Prefix: "/a/../b"}},
		{{Prefix: "a\x00"}},
	} {
		if _, err := NewNamespace(bad...); err == nil {
			t.Errorf("NewNamespace(%v) succeeded", bad)
		}
	}
}

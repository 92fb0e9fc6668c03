package redirector

import (
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/wanda-fed/wanda/internal/fed"
)

func rep(u string, prio int, active, free int64, labels map[string]string) fed.Replica {
	return fed.Replica{URL: u, Priority: prio, Labels: labels, Load: fed.Load{Active: active, FreeBytes: free}}
}

func urls(reps []fed.Replica) []string {
	var out []string
	for _, r := range reps {
		out = append(out, r.URL)
	}
	return out
}

func TestOrder(t *testing.T) {
	t.Parallel()
	site := map[string]string{"site": "a"}
	both := map[string]string{"site": "a", "region": "eu"}
	tests := []struct {
		name   string
		opts   Options
		in     []fed.Replica
		want   []string
		sorted bool // want is the only valid order
	}{
		{"load", Options{Select: "load"},
			[]fed.Replica{rep("a", 0, 5, 0, nil), rep("b", 0, 1, 0, nil), rep("c", 0, 3, 0, nil)}, []string{"b", "c", "a"}, true},
		{"space", Options{Select: "space"},
			[]fed.Replica{rep("a", 0, 0, 5, nil), rep("b", 0, 0, 1, nil), rep("c", 0, 0, 9, nil)}, []string{"c", "a", "b"}, true},
		{"priority before load", Options{Select: "load"},
			[]fed.Replica{rep("a", 1, 0, 0, nil), rep("b", 0, 9, 0, nil)}, []string{"b", "a"}, true},
		{"preferred labels first", Options{Select: "load", Prefer: []string{"site=a", "region=eu"}},
			[]fed.Replica{rep("a", 0, 0, 0, nil), rep("b", 5, 9, 0, site), rep("c", 9, 9, 0, both)}, []string{"c", "b", "a"}, true},
		{"duplicates dropped", Options{Select: "load"},
			[]fed.Replica{rep("a", 0, 1, 0, nil), rep("a", 0, 2, 0, nil), rep("b", 0, 3, 0, nil)}, []string{"a", "b"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.URL = "http://127.0.0.1:9"
			r, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 { // ties are shuffled: the order must not depend on it
				if got := urls(r.order("/f", tc.in)); !slices.Equal(got, tc.want) {
					t.Fatalf("order %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestOrderSpreadsTies(t *testing.T) {
	t.Parallel()
	for _, sel := range []string{"load", "random", "round-robin"} {
		r, err := New(Options{URL: "http://127.0.0.1:9", Select: sel})
		if err != nil {
			t.Fatal(err)
		}
		in := []fed.Replica{rep("a", 0, 1, 0, nil), rep("b", 0, 1, 0, nil), rep("c", 0, 1, 0, nil)}
		first := map[string]int{}
		for range 300 {
			first[r.order("/f", in)[0].URL]++
		}
		for _, u := range []string{"a", "b", "c"} {
			if first[u] < 50 {
				t.Errorf("%s: %s first %d times of 300 (%v)", sel, u, first[u], first)
			}
		}
		if sel == "round-robin" && (first["a"] != 100 || first["b"] != 100) {
			t.Errorf("round-robin: %v, want 100 each", first)
		}
	}
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{},
		{URL: "ftp://x"},
		{URL: "http://h/p"},
		{URL: "http://h", Select: "best"},
		{URL: "http://h", WriteSelect: "random"},
		{URL: "http://h", Prefer: []string{"site"}},
		{URL: "http://h", Prefer: []string{"=a"}},
		{URL: "http://h", Static: []fed.Member{{URL: "http://s"}}}, // no exports
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestParseTried(t *testing.T) {
	t.Parallel()
	got := parseTried(" A:1 ,b:2,,  ")
	if len(got) != 2 || !got["a:1"] || !got["b:2"] {
		t.Fatalf("parseTried: %v", got)
	}
	if parseTried("") != nil {
		t.Fatal("empty tried is not nil")
	}
	var long []byte
	for i := range 100 {
		long = append(long, []byte("h"+string(rune('0'+i%10))+string(rune('a'+i/10))+",")...)
	}
	if n := len(parseTried(string(long))); n > 64 {
		t.Fatalf("%d tried hosts kept, want at most 64", n)
	}
}

func TestWantsMetalink(t *testing.T) {
	t.Parallel()
	for accept, want := range map[string]bool{
		"":                          false,
		"*/*":                       false,
		"application/metalink4+xml": true,
		"text/html, application/metalink4+xml;q=0.5": true,
		"application/metalink+xml":                   false,
		"application/metalink4+xml-evil":             false,
		"APPLICATION/METALINK4+XML":                  true,
	} {
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("Accept", accept)
		if got := wantsMetalink(req); got != want {
			t.Errorf("Accept %q: %v, want %v", accept, got, want)
		}
	}
}

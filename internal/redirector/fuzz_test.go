package redirector

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/fed"
)

// FuzzHeartbeat posts arbitrary bodies to the membership API: the decoder
// and validation answer 200 or 400, never panic, and whatever joins is a
// valid member.
func FuzzHeartbeat(f *testing.F) {
	valid := func(m fed.Member) []byte {
		b, _ := json.Marshal(m)
		return b
	}
	base := fed.Member{Version: fed.Version, ID: "http://127.0.0.1:1", Instance: "i", Role: fed.RoleServer,
		URL: "http://127.0.0.1:1", Exports: []fed.Export{{Prefix: "/store"}}}
	f.Add(valid(base))
	redir := base
	redir.Role, redir.Exports, redir.Drained = fed.RoleRedirector, nil, true
	f.Add(valid(redir))
	labelled := base
	labelled.Labels, labelled.Priority, labelled.Load = map[string]string{"site": "a"}, -3, fed.Load{Active: -1, FreeBytes: 1 << 62}
	f.Add(valid(labelled))
	for _, s := range []string{
		"", "null", "{}", "[]", `"x"`, "{", strings.Repeat("[", 10000),
		`{"version":"wanda.fed/v1"}`,
		`{"version":"wanda.fed/v0","id":"a","role":"server","url":"http://h:1","exports":[{"prefix":"/"}]}`,
		`{"version":"wanda.fed/v1","id":"a","role":"server","url":"http://h:1","exports":[{"prefix":"/"}],"extra":1}`,
		`{"version":"wanda.fed/v1","id":"a","role":"server","url":"http://h:1","exports":[{"prefix":"/"}]} {}`,
		`{"version":"wanda.fed/v1","id":"a","role":"server","url":"http://h:1/p?q","exports":[{"prefix":"/a/../b"}]}`,
		`{"version":"wanda.fed/v1","id":"a","role":"server","url":"http://u@h:1","exports":[{"prefix":"/\u0000"}]}`,
		`{"version":"wanda.fed/v1","id":"a","role":"cache","url":"https://h","exports":[{"prefix":"//"}],"load":{"active":1e99}}`,
		`{"version":"wanda.fed/v1","id":"a","role":"server","url":"http://h:1","exports":[{"prefix":"/","read_only":"yes"}]}`,
	} {
		f.Add([]byte(s))
	}
	r, err := New(Options{URL: "http://127.0.0.1:9"})
	if err != nil {
		f.Fatal(err)
	}
	h := r.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/members", bytes.NewReader(body))
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var reply fed.HeartbeatReply
			if err := fed.Decode(rec.Body, &reply); err != nil {
				t.Fatalf("200 with a bad reply: %v", err)
			}
			if reply.IntervalMS <= 0 || reply.MissLimit <= 0 {
				t.Fatalf("reply %+v", reply)
			}
		case http.StatusBadRequest:
			var e fed.Error
			if err := fed.Decode(rec.Body, &e); err != nil || e.Error == "" {
				t.Fatalf("400 without a protocol error: %v %q", err, rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		for _, m := range r.Members() {
			if err := m.Validate(); err != nil {
				t.Fatalf("an invalid member joined: %+v: %v", m.Member, err)
			}
		}
	})
}

// FuzzRedirectPath sends arbitrary paths and methods to a redirector with
// no members: nothing is ever redirected, nothing panics, no 5xx.
func FuzzRedirectPath(f *testing.F) {
	for _, s := range []string{"/", "/store/x", "/../etc/passwd", "/a/%2e%2e/b", "/a\x00b", "*", "/api/v1/locate", "//x", "/a\\b"} {
		f.Add("GET", s, "")
		f.Add("PUT", s, "tried=127.0.0.1:1")
	}
	f.Add("PROPFIND", "/x", "path=/x&all=1")
	r, err := New(Options{URL: "http://127.0.0.1:9"})
	if err != nil {
		f.Fatal(err)
	}
	h := r.Handler()
	f.Fuzz(func(t *testing.T, method, p, query string) {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:9/", nil)
		if err != nil {
			t.Skip()
		}
		req.Method = method
		req.URL.Path = p
		req.URL.RawQuery = query
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 300 && rec.Code < 400 || rec.Code >= 500 {
			t.Fatalf("%q %q ?%q: status %d, Location %q", method, p, query, rec.Code, rec.Header().Get("Location"))
		}
	})
}

package fed

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClusterRedirector answers ClusterPath with whatever body is set.
type fakeClusterRedirector struct {
	srv    *httptest.Server
	mu     sync.Mutex
	body   string
	status int
	asked  int
	auth   string
}

func newFakeClusterRedirector(t *testing.T) *fakeClusterRedirector {
	f := &fakeClusterRedirector{status: http.StatusOK}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.asked++
		f.auth = r.Header.Get("Authorization")
		if r.URL.Path != ClusterPath {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte(f.body))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeClusterRedirector) set(status int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.body, f.asked = status, body, 0
}

func (f *fakeClusterRedirector) askedSince() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

func clusterJSON(t *testing.T, c Cluster) string {
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A member's view follows the redirector's list; answers it cannot use
// (an error, another version, a member without a URL) leave the last
// list in place.
func TestClusterView(t *testing.T) {
	t.Parallel()
	f := newFakeClusterRedirector(t)
	two := []ClusterMember{{ID: "a", URL: "http://127.0.0.1:1"}, {ID: "b", URL: "http://127.0.0.1:2", XRootD: "127.0.0.1:3"}}
	f.set(http.StatusOK, clusterJSON(t, Cluster{Version: Version, Select: "hash", Members: two}))
	v := StartClusterView(ClusterOptions{Redirector: f.srv.URL, Every: MinInterval, Token: "sesame"})
	t.Cleanup(v.Stop)
	<-v.Started()
	if got := v.Ring().Members(); !slices.Equal(got, two) {
		t.Fatalf("members %+v, want %+v", got, two)
	}
	f.mu.Lock()
	if f.auth != "Bearer sesame" {
		t.Errorf("Authorization %q", f.auth)
	}
	f.mu.Unlock()
	for _, bad := range []struct {
		status int
		body   string
	}{
		{http.StatusInternalServerError, `{"version":"wanda.fed/v1","error":"boom"}`},
		{http.StatusOK, clusterJSON(t, Cluster{Version: "wanda.fed/v9", Members: two[:1]})},
		{http.StatusOK, clusterJSON(t, Cluster{Version: Version, Members: []ClusterMember{{ID: "a", URL: "ftp://x"}}})},
		{http.StatusOK, clusterJSON(t, Cluster{Version: Version, Members: []ClusterMember{{URL: "http://127.0.0.1:1"}}})},
		{http.StatusOK, `{"version":"wanda.fed/v1","members":[`},
	} {
		f.set(bad.status, bad.body)
		waitFor(t, 5*time.Second, "asked again", func() bool { return f.askedSince() >= 2 })
		if got := v.Ring().Members(); !slices.Equal(got, two) {
			t.Fatalf("after %d %s: members %+v, want the last good list", bad.status, bad.body, got)
		}
	}
	one := two[1:]
	f.set(http.StatusOK, clusterJSON(t, Cluster{Version: Version, Members: one}))
	waitFor(t, 5*time.Second, "the new list", func() bool { return v.Ring().Len() == 1 })
	if o, ok := v.Ring().Owner("/any"); !ok || o.ID != "b" || o.RootHost() != "127.0.0.1:3" {
		t.Fatalf("owner %+v %v", o, ok)
	}
	v.Stop()
	v.Stop() // idempotent
	select {
	case <-v.done: // the polling goroutine has ended: no request after Stop
	default:
		t.Fatal("Stop returned before the polling ended")
	}
}

func TestRing(t *testing.T) {
	t.Parallel()
	var empty *Ring
	if _, ok := empty.Owner("/a"); ok || empty.Len() != 0 || empty.Owners("/a") != nil || NewRing(nil).Owners("/a") != nil {
		t.Fatal("an empty ring owns something")
	}
	ms := []ClusterMember{{ID: "x", URL: "http://x:1"}, {ID: "y", URL: "http://y:1"}, {ID: "z", URL: "http://z:1"}}
	r := NewRing(ms)
	for _, p := range []string{"/a", "/b/c", "/store/data/f.root"} {
		os := r.Owners(p)
		o, _ := r.Owner(p)
		if len(os) != 3 || os[0] != o {
			t.Fatalf("%s: owners %v, owner %v", p, os, o)
		}
	}
	if got := (ClusterMember{URL: "http://Host:5"}).RootHost(); got != "host:5" {
		t.Fatalf("RootHost %q", got)
	}
}

func TestClusterTarget(t *testing.T) {
	t.Parallel()
	plain := ClusterMember{ID: "a", URL: "http://c1:1096"}
	secure := ClusterMember{ID: "b", URL: "https://c2:1096"}
	for _, tc := range []struct {
		m         ClusterMember
		path, raw string
		want      string
	}{
		{plain, "/store/f", "", "http://c1:1096/store/f?cluster_hop=1"},
		{plain, "/store/a b", "x=1&authz=Bearer%20t&tried=h:1", "http://c1:1096/store/a%20b?x=1&cluster_hop=1"},
		{secure, "/store/f", "authz=Bearer%20t&cluster_hop=1", "https://c2:1096/store/f?authz=Bearer%20t&cluster_hop=1"},
	} {
		if got := ClusterTarget(tc.m, tc.path, tc.raw); got != tc.want {
			t.Errorf("ClusterTarget(%s, %q, %q) = %q, want %q", tc.m.URL, tc.path, tc.raw, got, tc.want)
		}
	}
}

package redirector

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/wanda-fed/wanda/internal/fed"
)

func postEvents(t *testing.T, base string, ev fed.Events) int {
	t.Helper()
	b, _ := json.Marshal(ev)
	resp, err := http.Post(base+fed.EventsPath, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A member's file notices (have, gone) reach the redirector's cache and
// its parents: a negative answer cached above is forgotten when a file
// appears below, and a removed file's replica is forgotten.
func TestMemberEvents(t *testing.T) {
	top := startRedirector(t, Options{})
	mid := startRedirector(t, Options{Parents: []string{top.srv.URL}})
	m := newFakeMember(t, "/store/old")
	mid.Heartbeat(m.member())
	eventually(t, "mid to join top with /store", func() bool {
		for _, s := range top.Members() {
			if s.ID == mid.ID() && len(s.Exports) == 1 {
				return true
			}
		}
		return false
	})
	ctx := context.Background()
	if res := top.Locate(ctx, Query{Path: "/store/new"}); res.Status != fed.NotFound {
		t.Fatalf("a file nobody has: %+v", res)
	}
	if res := top.Locate(ctx, Query{Path: "/store/new"}); !res.Cached {
		t.Fatalf("the miss is not cached above: %+v", res)
	}
	m.set(func(m *fakeMember) { m.files["/store/new"] = true })
	id := m.member().ID
	if code := postEvents(t, mid.srv.URL, fed.Events{Version: fed.Version, ID: id, Instance: "one",
		Events: []fed.Event{{Path: "/store/new", Present: true}}}); code != http.StatusNoContent {
		t.Fatalf("events: %d", code)
	}
	// At the member's redirector: a replica at once, without a query.
	res := mid.Locate(ctx, Query{Path: "/store/new", CacheOnly: true})
	if res.Status != fed.Found || len(res.Replicas) != 1 || res.Replicas[0].URL != fed.FileURL(m.srv.URL, "/store/new") {
		t.Fatalf("after a have, the redirector's cache: %+v", res)
	}
	// Above: the negative answer is forgotten (the notice travels up).
	eventually(t, "the parent to find /store/new", func() bool {
		return top.Locate(ctx, Query{Path: "/store/new"}).Status == fed.Found
	})

	// Gone: the replica is forgotten below.
	if code := postEvents(t, mid.srv.URL, fed.Events{Version: fed.Version, ID: id, Instance: "one",
		Events: []fed.Event{{Path: "/store/new", Present: false}}}); code != http.StatusNoContent {
		t.Fatalf("events: %d", code)
	}
	if res := mid.Locate(ctx, Query{Path: "/store/new", CacheOnly: true}); res.Cached {
		t.Fatalf("after a gone, the redirector still has: %+v", res)
	}

	// Refused: an unknown member or instance, bad paths, another version.
	for name, c := range map[string]struct {
		ev   fed.Events
		want int
	}{
		"unknown member":   {fed.Events{Version: fed.Version, ID: "http://nobody:1", Instance: "one", Events: []fed.Event{{Path: "/store/x", Present: true}}}, http.StatusNotFound},
		"old instance":     {fed.Events{Version: fed.Version, ID: id, Instance: "two", Events: []fed.Event{{Path: "/store/x", Present: true}}}, http.StatusNotFound},
		"hostile path":     {fed.Events{Version: fed.Version, ID: id, Instance: "one", Events: []fed.Event{{Path: "/store/../etc/passwd", Present: true}}}, http.StatusBadRequest},
		"relative path":    {fed.Events{Version: fed.Version, ID: id, Instance: "one", Events: []fed.Event{{Path: "store/x", Present: true}}}, http.StatusBadRequest},
		"no events":        {fed.Events{Version: fed.Version, ID: id, Instance: "one"}, http.StatusBadRequest},
		"another protocol": {fed.Events{Version: "wanda.fed/v0", ID: id, Instance: "one", Events: []fed.Event{{Path: "/store/x"}}}, http.StatusBadRequest},
	} {
		if code := postEvents(t, mid.srv.URL, c.ev); code != c.want {
			t.Errorf("%s: %d, want %d", name, code, c.want)
		}
	}
	if mid.status(t, http.MethodGet, fed.EventsPath) != http.StatusMethodNotAllowed {
		t.Error("GET of the events endpoint")
	}
}

// A file outside the member's exports is not taken from it.
func TestEventsOutsideExports(t *testing.T) {
	tr := startRedirector(t, Options{})
	m := newFakeMember(t)
	tr.Heartbeat(m.member())
	tr.Notify(m.member().ID, "/other/f", true)
	if res := tr.Locate(context.Background(), Query{Path: "/other/f", CacheOnly: true}); res.Cached {
		t.Fatalf("a notice outside the member's exports was cached: %+v", res)
	}
}

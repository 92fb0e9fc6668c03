package app_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/monitor/probe"
)

// Site probes: the global redirector reads each site's test file
// through itself and directly from every server, and writes one beside
// it; a site whose file is gone is failed with the reason (API and
// metrics) and recovers once it is back.
func TestSiteProbes(t *testing.T) {
	f := fedtest.Start(t, fedtest.Options{Sites: 2, ServersPerSite: 2, Global: true, Redirector: func(name string, cfg *config.Config) {
		if name == "global" {
			cfg.Redirector.Probe = config.Probe{Path: "/store/test/{site}/probe.dat", Every: time.Second, Timeout: 5 * time.Second, Write: true}
		}
	}})
	put := func(site int, ok bool) {
		for _, srv := range f.Sites[site].Servers {
			p := srv.LocalPath("/store/test/site" + string(rune('0'+site)) + "/probe.dat")
			if !ok {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(strings.Repeat("probe\n", 1000)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, true)
	put(1, true)
	sites := func() map[string]probe.Site {
		resp, err := http.Get(f.Global.URL + "/api/v1/probes")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct{ Sites []probe.Site }
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&got) != nil {
			t.Fatalf("/api/v1/probes: %s", resp.Status)
		}
		m := map[string]probe.Site{}
		for _, s := range got.Sites {
			m[s.Site] = s
		}
		return m
	}
	wait := func(what string, ok func(map[string]probe.Site) bool) map[string]probe.Site {
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := sites()
			if ok(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s: %+v", what, got)
			}
			time.Sleep(100 * time.Millisecond) // polling the API
		}
	}
	got := wait("both sites probed ok", func(m map[string]probe.Site) bool {
		// Through the redirector, and a read and a write on each server.
		return m["site0"].OK && m["site1"].OK && len(m["site0"].Results) == 5 && len(m["site1"].Results) == 5
	})
	for _, r := range got["site1"].Results {
		if r.Target == "redirector" && r.Kind == "read" && !strings.HasPrefix(r.Server, "http://") {
			t.Errorf("the read through the redirector does not say who answered: %+v", r)
		}
	}

	put(1, false)
	// The file goes from one server, then the other: a round between the
	// two fails a direct read while the read through the redirector,
	// sent to the other server, still works. Wait for that one too.
	got = wait("site1 failed, through the redirector too", func(m map[string]probe.Site) bool {
		if !m["site0"].OK || m["site1"].OK {
			return false
		}
		for _, r := range m["site1"].Results {
			if r.Target == "redirector" && r.Kind == "read" {
				return !r.OK
			}
		}
		return false
	})
	if !strings.Contains(got["site1"].Reason, "404") {
		t.Errorf("site1's reason %q does not name the 404", got["site1"].Reason)
	}
	if v := f.Global.Metric("wanda_probe_ok", "site", "site1", "target", "redirector", "kind", "read"); v != 0 {
		t.Errorf("wanda_probe_ok{site1, redirector, read} = %v, want 0", v)
	}
	if v := f.Global.Metric("wanda_probe_runs_total", "site", "site1", "result", "failed"); v == 0 {
		t.Errorf("no failed probe of site1 counted")
	}
	put(1, true)
	wait("site1 back", func(m map[string]probe.Site) bool { return m["site0"].OK && m["site1"].OK })
	// No write probe leaves its file behind: a moment with none (a round
	// starts every second and writes for a few milliseconds).
	leftovers := func() []string {
		var left []string
		for _, s := range f.Sites {
			for _, srv := range s.Servers {
				ents, _ := os.ReadDir(filepath.Dir(srv.LocalPath("/store/test/" + s.Redirector.Config().Redirector.Labels["site"] + "/probe.dat")))
				for _, e := range ents {
					if e.Name() != "probe.dat" {
						left = append(left, srv.Name+": "+e.Name())
					}
				}
			}
		}
		return left
	}
	deadline := time.Now().Add(20 * time.Second)
	for left := leftovers(); len(left) > 0; left = leftovers() {
		if time.Now().After(deadline) {
			t.Fatalf("write probes left files: %v", left)
		}
		time.Sleep(20 * time.Millisecond) // polling the directories between rounds
	}
}

package app_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// TestListingsHideProtectedEntries: under a rule that lets anyone read
// /data, a stricter rule on /data/secret (group /cms) keeps that entry
// out of the listings of /data given to whom may not read it — PROPFIND,
// the JSON listing, root:// kXR_dirlist — and shows it to the group.
func TestListingsHideProtectedEntries(t *testing.T) {
	is := authtest.NewIssuer(t)
	cfg, dir := newConfig(t)
	authtest.Protect(is, "/data", true)(&cfg)
	cfg.Auth.Rules = []config.AuthRule{
		{Prefix: "/", AnonymousRead: true},
		{Prefix: "/data/secret", Read: []string{"group:/cms"}},
		{Prefix: "/data/plan.txt", Read: []string{"group:/cms"}},
	}
	for _, p := range []string{"open.txt", "plan.txt", "secretive.txt", "secret/f.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr, cancel, wait := start(t, cfg)
	defer func() { cancel(); _ = wait() }()
	addr = strings.TrimPrefix(addr, "http://")
	base := "http://" + addr
	cms := is.Token(t, "storage.create:/upload", map[string]any{"wlcg.groups": []string{"/cms"}})
	other := is.Token(t, "storage.create:/upload", map[string]any{"wlcg.groups": []string{"/atlas"}})
	deadline := time.Now().Add(10 * time.Second)
	for do(t, http.MethodGet, base+"/data/secret/f.txt", cms, "").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("issuer keys never fetched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	all := []string{"open.txt", "plan.txt", "secret", "secretive.txt"}
	public := []string{"open.txt", "secretive.txt"}
	for _, tc := range []struct {
		who, tok string
		want     []string
	}{{"anonymous", "", public}, {"another group", other, public}, {"the group", cms, all}} {
		status, body := listReq(t, "PROPFIND", base+"/data/", tc.tok, "Depth", "1")
		if status != http.StatusMultiStatus {
			t.Fatalf("%s: PROPFIND: %d %s", tc.who, status, body)
		}
		for _, name := range all {
			if got, want := strings.Contains(body, "/data/"+name+"<") || strings.Contains(body, "/data/"+name+"/<"), slices.Contains(tc.want, name); got != want {
				t.Errorf("%s: PROPFIND lists %s: %v, want %v", tc.who, name, got, want)
			}
		}
		status, body = listReq(t, http.MethodGet, base+"/data/", tc.tok, "Accept", "application/json")
		if status != http.StatusOK {
			t.Fatalf("%s: JSON listing: %d %s", tc.who, status, body)
		}
		for _, name := range all {
			if got, want := strings.Contains(body, `"name": "`+name+`"`), slices.Contains(tc.want, name); got != want {
				t.Errorf("%s: the JSON listing has %s: %v, want %v (%s)", tc.who, name, got, want, body)
			}
		}
	}
	// root://, anonymous: the same entries as over HTTP.
	c := client.New()
	xrdclient.Register(c)
	infos, err := c.List(t.Context(), "root://"+addr+"//data/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range infos {
		names = append(names, filepath.Base(strings.TrimSuffix(in.URL, "/")))
	}
	slices.Sort(names)
	if !slices.Equal(names, public) {
		t.Errorf("root:// dirlist, anonymous: %v, want %v", names, public)
	}
	// Reading it is refused all the same, of course.
	if a := do(t, http.MethodGet, base+"/data/secret/f.txt", "", ""); a.status != http.StatusUnauthorized {
		t.Errorf("anonymous read under the stricter rule: %d", a.status)
	}
}

func listReq(t *testing.T, method, u, tok, hk, hv string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(hk, hv)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	return resp.StatusCode, body.String()
}

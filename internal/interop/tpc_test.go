package interop

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// tpcSites are two wanda servers that trust one issuer (scopes relative
// to /store, no anonymous reads) and let third-party copies reach
// loopback.
type tpcSites struct {
	is                    *authtest.Issuer
	src, dst              *testserver.Server
	srcDir, dstDir        string
	data                  []byte
	tokenEnv, readOnlyEnv []string
}

func startTPCSites(t *testing.T, dstDir string) *tpcSites {
	t.Helper()
	s := &tpcSites{is: authtest.NewIssuer(t), srcDir: t.TempDir(), dstDir: dstDir, data: randomBytes(7<<20+333, 21)}
	if s.dstDir == "" {
		s.dstDir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(s.srcDir, "f.bin"), s.data, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := func(c *config.Config) {
		authtest.Protect(s.is, "/store", false)(c)
		c.Server.TPC.Allow = []string{"127.0.0.0/8"}
		c.Server.TPC.MarkerInterval = 100 * time.Millisecond
	}
	s.src = testserver.StartWith(t, testserver.Options{Configure: conf}, config.Export{Prefix: "/store", Path: s.srcDir})
	s.dst = testserver.StartWith(t, testserver.Options{Configure: conf}, config.Export{Prefix: "/store", Path: s.dstDir})
	tok := s.is.Token(t, "storage.read:/ storage.modify:/", nil)
	s.tokenEnv = []string{"GFAL_PYTHONBIN=/usr/bin/python3", "BEARER_TOKEN=" + tok}
	s.readOnlyEnv = []string{"GFAL_PYTHONBIN=/usr/bin/python3", "BEARER_TOKEN=" + s.is.Token(t, "storage.read:/", nil)}
	for _, srv := range []*testserver.Server{s.src, s.dst} {
		waitFor(t, 10*time.Second, "the servers to fetch the issuer's keys", func() bool {
			req, _ := http.NewRequest(http.MethodHead, srv.URL+"/store/", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode < 400
		})
	}
	return s
}

func (s *tpcSites) check(t *testing.T, name string) {
	t.Helper()
	sameBytes(t, name, readFile(t, filepath.Join(s.dstDir, name)), s.data)
}

// gfal2, FTS's library, drives wanda's COPY in both modes with a token
// (BEARER_TOKEN: the same token for the COPY and, delegated, for the
// remote), verifies adler32 end to end, and reports a copy that fails
// on the marker stream with the failure's words.
func TestGfal2ThirdPartyCopy(t *testing.T) {
	requireTool(t, "gfal-copy")
	s := startTPCSites(t, "")
	src := s.src.URL + "/store/f.bin"
	for _, mode := range []string{"pull", "push"} {
		dst := s.dst.URL + "/store/gfal-" + mode + ".bin"
		r := runEnv(t, s.tokenEnv, "", "gfal-copy", "--copy-mode", mode, "-K", "adler32", src, dst)
		if r.Err != nil {
			t.Fatalf("gfal-copy --copy-mode %s: %v\n%s%s", mode, r.Err, r.Stdout, r.Stderr)
		}
		s.check(t, "gfal-"+mode+".bin")
		if !strings.Contains(s.dst.Log()+s.src.Log(), `method=COPY`) {
			t.Fatalf("gfal-copy --copy-mode %s did not use COPY", mode)
		}
	}
	if !strings.Contains(s.src.Log(), "mode=push") || !strings.Contains(s.dst.Log(), "mode=pull") {
		t.Errorf("the servers did not log one pull and one push")
	}
	// A token that may not write at the destination: refused before
	// anything moves, and gfal says so.
	r := runEnv(t, s.readOnlyEnv, "", "gfal-copy", "--copy-mode", "pull", src, s.dst.URL+"/store/ro.bin")
	if r.Err == nil || !strings.Contains(string(r.Stderr), "403") {
		t.Errorf("gfal-copy with a read-only token: %v\n%s", r.Err, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(s.dstDir, "ro.bin")); err == nil {
		t.Errorf("a refused copy left its destination")
	}
}

// The destination's disk fills during a pull: gfal2 reports the failure
// line's reason, and nothing is left.
func TestGfal2ThirdPartyCopyNoSpace(t *testing.T) {
	requireTool(t, "gfal-copy")
	s := startTPCSites(t, smallDisk(t, 2<<20))
	r := runEnv(t, s.tokenEnv, "", "gfal-copy", "--copy-mode", "pull", s.src.URL+"/store/f.bin", s.dst.URL+"/store/f.bin")
	if r.Err == nil || !strings.Contains(string(r.Stderr), "no space") {
		t.Errorf("gfal-copy onto a full disk: %v\n%s", r.Err, r.Stderr)
	}
	waitFor(t, 10*time.Second, "nothing left on the full disk", func() bool {
		ents, _ := os.ReadDir(s.dstDir)
		return len(ents) == 0
	})
}

// davix-cp, the other WLCG HTTP client, in both modes (its token in a
// header for the COPY and, as TransferHeaderAuthorization, for the
// remote), and its report of a failed copy.
func TestDavixThirdPartyCopy(t *testing.T) {
	requireTool(t, "davix-cp")
	s := startTPCSites(t, "")
	tok := strings.TrimPrefix(s.tokenEnv[1], "BEARER_TOKEN=")
	hdrs := []string{"-H", "Authorization: Bearer " + tok, "-H", "TransferHeaderAuthorization: Bearer " + tok}
	for _, mode := range []string{"pull", "push"} {
		name := "davix-" + mode + ".bin"
		args := append(append([]string{"--copy-mode", mode}, hdrs...), s.src.URL+"/store/f.bin", s.dst.URL+"/store/"+name)
		if r := runEnv(t, nil, "", "davix-cp", args...); r.Err != nil {
			t.Fatalf("davix-cp --copy-mode %s: %v\n%s%s", mode, r.Err, r.Stdout, r.Stderr)
		}
		s.check(t, name)
	}
	args := append(append([]string{"--copy-mode", "pull"}, hdrs...), s.src.URL+"/store/missing", s.dst.URL+"/store/x")
	r := runEnv(t, nil, "", "davix-cp", args...)
	if r.Err == nil || !strings.Contains(string(r.Stdout)+string(r.Stderr), "remote 404") {
		t.Errorf("davix-cp of a missing source: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	if strings.Contains(s.src.Log()+s.dst.Log(), tok) {
		t.Errorf("the token is in a server's log")
	}
}

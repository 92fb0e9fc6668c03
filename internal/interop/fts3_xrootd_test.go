package interop

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
)

// The transfer service between a wanda storage and XRootD 5.5 with its
// SciTokens plugin (XrdHttpTPC over HTTPS), both taking tokens only, in
// both directions, with jobs as Rucio submits them (davs:// URLs, a
// token per source and destination): each copy is a third-party copy
// whose COPY carries the destination's token and delegates the source's
// (TransferHeaderAuthorization).
func TestFTSJobsWithXRootD(t *testing.T) {
	m := startMixedTPC(t)
	robot := m.is.Token(t, "fts", map[string]any{"sub": "robot"})
	jwks := filepath.Join(t.TempDir(), "issuer.jwks")
	if err := os.WriteFile(jwks, m.is.JWKS, 0o644); err != nil {
		t.Fatal(err)
	}
	svc := startChild(t, "transfer", "serve", "--listen", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(t.TempDir(), "t.db"),
		"--log-format", "json", "--allow", "127.0.0.0/8", "--ca", m.caDir,
		"--token-issuer", m.is.URL, "--token-keys", m.is.URL+"="+jwks, "--token-audience", authtest.Audience)
	t.Cleanup(func() {
		if strings.Contains(svc.Log(), m.tok) || strings.Contains(svc.Log(), robot) {
			t.Errorf("a token is in the service's log")
		}
		if t.Failed() {
			t.Logf("service log:\n%s", svc.Log())
		}
	})
	davs := func(u string) string { return "davs://" + strings.TrimPrefix(u, "https://") }
	type job struct {
		src, dst, at string
	}
	jobs := []job{
		{davs(m.wanda.URL) + "/data/w.bin", davs(m.xrd.HTTPS) + "/data/fts-from-wanda.bin", m.xrd.Path("/data/fts-from-wanda.bin")},
		{davs(m.xrd.HTTPS) + "/data/x.bin", davs(m.wanda.URL) + "/data/fts-from-xrootd.bin", filepath.Join(m.wandaDir, "fts-from-xrootd.bin")},
	}
	var ids []string
	for i, j := range jobs {
		body, _ := json.Marshal(map[string]any{
			"files": []any{map[string]any{"sources": []string{j.src}, "destinations": []string{j.dst}, "source_tokens": []string{m.tok},
				"destination_tokens": []string{m.tok}, "filesize": len(m.data), "selection_strategy": "orderly", "activity": "default",
				"metadata": map[string]any{"request_id": i}}},
			"params": map[string]any{"verify_checksum": "both", "overwrite": false, "priority": 3, "copy_pin_lifetime": 172800,
				"bring_online": nil, "job_metadata": map[string]any{"issuer": "rucio", "multi_sources": false}},
		})
		var out map[string]string
		if code := apiJSON(t, http.DefaultClient, "POST", svc.URL+"/jobs", robot, body, &out); code != 200 || out["job_id"] == "" {
			t.Fatalf("submit %s -> %s: %d %v", j.src, j.dst, code, out)
		}
		ids = append(ids, out["job_id"])
	}
	var states []struct {
		State string `json:"job_state"`
		Files []struct {
			State  string  `json:"file_state"`
			Reason *string `json:"reason"`
		} `json:"files"`
	}
	waitFor(t, 2*time.Minute, "both jobs to end", func() bool {
		apiJSON(t, http.DefaultClient, "GET", svc.URL+"/jobs/"+strings.Join(ids, ",")+"?files=file_state,reason", robot, nil, &states)
		for _, s := range states {
			if s.State == "SUBMITTED" || s.State == "ACTIVE" {
				return false
			}
		}
		return true
	})
	for i, s := range states {
		if s.State != "FINISHED" {
			reason := ""
			if len(s.Files) > 0 && s.Files[0].Reason != nil {
				reason = *s.Files[0].Reason
			}
			t.Errorf("%s -> %s: %s (%s)", jobs[i].src, jobs[i].dst, s.State, reason)
			continue
		}
		sameBytes(t, jobs[i].dst, readFile(t, jobs[i].at), m.data)
		var fs struct{ Files []struct{ Mode string } }
		apiJSON(t, http.DefaultClient, "GET", svc.URL+"/api/v1/jobs/"+ids[i]+"/files", robot, nil, &fs)
		if len(fs.Files) != 1 || fs.Files[0].Mode != "pull" {
			t.Errorf("%s -> %s: mode %+v, want a third-party copy pulled by the destination", jobs[i].src, jobs[i].dst, fs.Files)
		}
	}
}

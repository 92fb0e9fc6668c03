package interop

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// FTS3's own clients against `wanda transfer serve`: the fts-rest-*
// commands and the fts3.rest.client.easy bindings of PyPI's fts3
// (installed for Debian's /usr/bin/python3, with Debian's M2Crypto, by
// .ci/run), between two wanda storages that take tokens only.

// ftsPython is the interpreter FTS3's clients are installed for.
const ftsPython = "/usr/bin/python3"

// ftsSite is the service (a child process, with a token issuer and an
// administrator) and two token-only storages.
type ftsSite struct {
	svc            *testproc.Process
	is             *authtest.Issuer
	src, dst       *testserver.Server
	srcDir, dstDir string
	// The submitter's FTS access token, the storages' tokens, the
	// administrator's.
	robot, srcTok, dstTok, admin string
}

// needFTSClients fails (CI) or skips without FTS3's clients.
func needFTSClients(t *testing.T) {
	t.Helper()
	requireTool(t, "fts-rest-transfer-submit")
	if err := exec.Command(ftsPython, "-c", "import fts3.rest.client.easy, M2Crypto").Run(); err != nil {
		missing(t, "PyPI fts3 (with python3-m2crypto) for "+ftsPython+": "+err.Error())
	}
}

func startFTSSite(t *testing.T) *ftsSite {
	t.Helper()
	s := &ftsSite{is: authtest.NewIssuer(t), srcDir: t.TempDir(), dstDir: t.TempDir()}
	conf := func(c *config.Config) {
		authtest.Protect(s.is, "/", false)(c)
		c.Server.TPC.Allow = []string{"127.0.0.0/8"}
	}
	s.src = testserver.StartWith(t, testserver.Options{Configure: conf}, config.Export{Prefix: "/store", Path: s.srcDir})
	s.dst = testserver.StartWith(t, testserver.Options{Configure: conf}, config.Export{Prefix: "/store", Path: s.dstDir})
	s.robot = s.is.Token(t, "fts", map[string]any{"sub": "robot", "wlcg.groups": []string{"/dteam"}})
	s.admin = s.is.Token(t, "fts", map[string]any{"sub": "ops"})
	s.srcTok = s.is.Token(t, "storage.read:/store", map[string]any{"sub": "robot"})
	s.dstTok = s.is.Token(t, "storage.modify:/store storage.read:/store", map[string]any{"sub": "robot"})
	s.svc = startChild(t, "transfer", "serve", "--listen", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(t.TempDir(), "t.db"),
		"--log-format", "json", "--allow", "127.0.0.0/8", "--token-issuer", s.is.URL, "--token-keys", s.is.URL+"="+s.is.JWKSFile(t),
		"--token-audience", authtest.Audience, "--admin", "sub:"+s.is.URL+"#ops")
	t.Cleanup(func() {
		log := s.svc.Log()
		for _, tok := range []string{s.robot, s.srcTok, s.dstTok, s.admin} {
			if strings.Contains(log, tok) {
				t.Errorf("a token is in the service's log")
			}
		}
		if t.Failed() {
			t.Logf("service log:\n%s", log)
		}
	})
	return s
}

// put writes a file at the source and returns its URL.
func (s *ftsSite) put(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(s.srcDir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return s.src.URL + "/store/" + name
}

// cli runs fts-rest-NAME against the service as tok. Tokens stand in the
// arguments as {robot}, {src}, {dst}, {admin}: the command's arguments
// go through the environment, so that tokens stay out of the test's
// log; the script itself runs as installed.
func (s *ftsSite) cli(t *testing.T, tok, name string, args ...string) result {
	t.Helper()
	script, err := exec.LookPath("fts-rest-" + name)
	if err != nil {
		t.Fatal(err)
	}
	subst := strings.NewReplacer("{robot}", s.robot, "{src}", s.srcTok, "{dst}", s.dstTok, "{admin}", s.admin)
	full := append([]string{"-s", s.svc.URL, "--fts-access-token", tok}, args...)
	for i := range full {
		full[i] = subst.Replace(full[i])
	}
	t.Logf("fts-rest-%s %s", name, strings.Join(args, " "))
	const run = `import os, runpy, sys
sys.argv = [os.environ["FTS_SCRIPT"]] + os.environ["FTS_ARGS"].split("\n")
runpy.run_path(sys.argv[0], run_name="__main__")`
	return runEnv(t, []string{"FTS_SCRIPT=" + script, "FTS_ARGS=" + strings.Join(full, "\n"), "HOME=" + t.TempDir()}, "", ftsPython, "-c", run)
}

// mustCLI is cli failing the test on an error.
func (s *ftsSite) mustCLI(t *testing.T, tok, name string, args ...string) string {
	t.Helper()
	r := s.cli(t, tok, name, args...)
	if r.Err != nil {
		t.Fatalf("fts-rest-%s: %v\n%s%s", name, r.Err, r.Stdout, r.Stderr)
	}
	return string(r.Stdout) + string(r.Stderr)
}

var jobIDLine = regexp.MustCompile(`Job id: ([0-9a-f-]{36})`)

// status polls fts-rest-transfer-status until the job ends, and returns
// its final state.
func (s *ftsSite) status(t *testing.T, id string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	state := regexp.MustCompile(`Status: (\w+)`)
	for {
		out := s.mustCLI(t, s.robot, "transfer-status", id)
		m := state.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("fts-rest-transfer-status: %s", out)
		}
		switch m[1] {
		case "FINISHED", "FINISHEDDIRTY", "FAILED", "CANCELED":
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s", id, m[1])
		}
		time.Sleep(200 * time.Millisecond) // polling the service
	}
}

func TestFTSRestCommands(t *testing.T) {
	needFTSClients(t)
	s := startFTSSite(t)

	out := s.mustCLI(t, s.robot, "whoami")
	if !strings.Contains(out, "User DN: robot") || !strings.Contains(out, "VO: dteam") || !strings.Contains(out, "Delegation id: ") {
		t.Fatalf("fts-rest-whoami: %s", out)
	}
	var who map[string]any
	if err := json.Unmarshal(s.cli(t, s.robot, "whoami", "-j").Stdout, &who); err != nil || who["method"] != "oauth2" || who["user_dn"] != "robot" {
		t.Fatalf("fts-rest-whoami -j: %v %v", who, err)
	}

	// One file, with the storages' tokens.
	one := []byte(strings.Repeat("one file ", 1000))
	out = s.mustCLI(t, s.robot, "transfer-submit", "--src-access-token", "{src}", "--dst-access-token", "{dst}",
		s.put(t, "one", one), s.dst.URL+"/store/one")
	m := jobIDLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("fts-rest-transfer-submit: %s", out)
	}
	if st := s.status(t, m[1]); st != "FINISHED" {
		t.Fatalf("job %s: %s", m[1], st)
	}
	sameBytes(t, "one", readFile(t, filepath.Join(s.dstDir, "one")), one)

	// A bulk file: three files with their tokens, one of two sources.
	var files []map[string]any
	datas := map[string][]byte{}
	for i, n := range []string{"b0", "b1", "b2"} {
		datas[n] = randomBytes(50000+i*1000, uint64(i))
		srcs := []string{s.put(t, "bulk/"+n, datas[n])}
		toks := []string{s.srcTok}
		if i == 2 {
			srcs = append([]string{s.src.URL + "/store/bulk/missing"}, srcs...)
			toks = append(toks, s.srcTok)
		}
		files = append(files, map[string]any{"sources": srcs, "destinations": []string{s.dst.URL + "/store/bulk/" + n},
			"source_tokens": toks, "destination_tokens": []string{s.dstTok}, "metadata": map[string]any{"n": i}, "selection_strategy": "orderly"})
	}
	bulk := filepath.Join(t.TempDir(), "bulk.json")
	b, _ := json.Marshal(map[string]any{"files": files, "params": map[string]any{"verify_checksum": "both", "retry": 1}})
	if err := os.WriteFile(bulk, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out = s.mustCLI(t, s.robot, "transfer-submit", "-f", bulk)
	if m = jobIDLine.FindStringSubmatch(out); m == nil {
		t.Fatalf("fts-rest-transfer-submit -f: %s", out)
	}
	bulkID := m[1]
	if st := s.status(t, bulkID); st != "FINISHED" {
		t.Fatalf("bulk job: %s", st)
	}
	for n, d := range datas {
		sameBytes(t, n, readFile(t, filepath.Join(s.dstDir, "bulk", n)), d)
	}
	var job struct {
		State string `json:"job_state"`
		Files []struct {
			State  string `json:"file_state"`
			Source string `json:"source_surl"`
			Index  int    `json:"file_index"`
		} `json:"files"`
		DM []any `json:"dm"`
	}
	if err := json.Unmarshal(s.cli(t, s.robot, "transfer-status", "-j", bulkID).Stdout, &job); err != nil {
		t.Fatalf("fts-rest-transfer-status -j: %v", err)
	}
	if job.State != "FINISHED" || len(job.Files) != 4 || job.Files[2].State != "FAILED" || job.Files[3].State != "FINISHED" || job.Files[3].Index != 2 {
		t.Fatalf("fts-rest-transfer-status -j: %+v", job)
	}

	// A job waiting on a banned storage: listed, canceled.
	if r := s.cli(t, s.robot, "ban", "--storage", "http://127.0.0.1", "--status", "wait", "--allow-submit"); r.Err == nil {
		t.Fatalf("fts-rest-ban by a non-administrator succeeded: %s", r.Stdout)
	}
	s.mustCLI(t, s.admin, "ban", "--storage", "http://127.0.0.1", "--status", "wait", "--allow-submit")
	out = s.mustCLI(t, s.robot, "transfer-submit", "--src-access-token", "{src}", "--dst-access-token", "{dst}",
		s.put(t, "held", one), s.dst.URL+"/store/held")
	if m = jobIDLine.FindStringSubmatch(out); m == nil {
		t.Fatalf("fts-rest-transfer-submit: %s", out)
	}
	held := m[1]
	if out = s.mustCLI(t, s.robot, "transfer-list"); !strings.Contains(out, "Request ID: "+held) || !strings.Contains(out, "Status: SUBMITTED") || !strings.Contains(out, "VO Name: dteam") {
		t.Fatalf("fts-rest-transfer-list: %s", out)
	}
	if out = s.mustCLI(t, s.robot, "transfer-cancel", held); strings.TrimSpace(out) != "CANCELED" {
		t.Fatalf("fts-rest-transfer-cancel: %q", out)
	}
	if out = s.mustCLI(t, s.robot, "transfer-list"); strings.Contains(out, held) {
		t.Errorf("a canceled job is listed as active: %s", out)
	}
	s.mustCLI(t, s.admin, "ban", "--storage", "http://127.0.0.1", "--unban")
	if _, err := os.Stat(filepath.Join(s.dstDir, "held")); err == nil {
		t.Errorf("the canceled job's file arrived")
	}
}

// The Python bindings, as a program of an experiment would use them.
func TestFTSEasyBindings(t *testing.T) {
	needFTSClients(t)
	s := startFTSSite(t)
	data := randomBytes(300000, 9)
	src := s.put(t, "easy", data)
	prog := `import json, os, time
import fts3.rest.client.easy as fts3
ctx = fts3.Context(os.environ["ENDPOINT"], fts_access_token=os.environ["FTS_TOKEN"])
t = fts3.new_transfer(os.environ["SRC"], os.environ["DST"], checksum="ADLER32", metadata={"campaign": "easy"},
	source_token=os.environ["SRC_TOKEN"], destination_token=os.environ["DST_TOKEN"])
job = fts3.new_job([t], verify_checksum=True, priority=4, metadata={"by": "bindings"}, retry=1)
jid = fts3.submit(ctx, job)
for _ in range(600):
	st = fts3.get_job_status(ctx, jid, list_files=True)
	if st["job_state"] in ("FINISHED", "FINISHEDDIRTY", "FAILED", "CANCELED"):
		break
	time.sleep(0.1)
out = {"id": jid, "state": st["job_state"], "priority": st["priority"], "meta": st["job_metadata"],
	"files": [(f["file_state"], f["file_metadata"], f["checksum"]) for f in st["files"]], "dm": st["dm"]}
t2 = fts3.new_transfer(os.environ["SRC"], os.environ["DST"] + ".2", source_token=os.environ["SRC_TOKEN"],
	destination_token=os.environ["DST_TOKEN"])
try:
	fts3.submit(ctx, fts3.new_job([t2], bring_online=3600))
	out["staging"] = "accepted"
except Exception as e:
	out["staging"] = str(e)
out["whoami"] = fts3.whoami(ctx)["user_dn"]
print(json.dumps(out))
`
	r := runEnv(t, []string{"ENDPOINT=" + s.svc.URL, "FTS_TOKEN=" + s.robot, "SRC_TOKEN=" + s.srcTok, "DST_TOKEN=" + s.dstTok,
		"SRC=" + src, "DST=" + s.dst.URL + "/store/easy", "HOME=" + t.TempDir()}, "", ftsPython, "-c", prog)
	if r.Err != nil {
		t.Fatalf("the bindings: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	var out struct {
		ID, State, Staging, Whoami string
		Priority                   int
		Meta                       map[string]any
		Files                      [][]any
		DM                         []any
	}
	if err := json.Unmarshal(r.Stdout, &out); err != nil {
		t.Fatalf("%v: %s", err, r.Stdout)
	}
	if out.State != "FINISHED" || out.Priority != 4 || out.Meta["by"] != "bindings" || len(out.Files) != 1 || out.Files[0][0] != "FINISHED" ||
		out.Files[0][1].(map[string]any)["campaign"] != "easy" || out.Whoami != "robot" || out.DM == nil {
		t.Fatalf("the bindings saw: %+v", out)
	}
	if !strings.Contains(out.Staging, "no tape") {
		t.Errorf("a staging job through the bindings: %s", out.Staging)
	}
	sameBytes(t, "easy", readFile(t, filepath.Join(s.dstDir, "easy")), data)
}

// apiJSON sends a request to the service as tok (none: "") and decodes
// the answer into out (nil: not read); it returns the status.
func apiJSON(t *testing.T, hc *http.Client, method, url, tok string, body []byte, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %d: %v", method, url, resp.StatusCode, err)
		}
	}
	return resp.StatusCode
}

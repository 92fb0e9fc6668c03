package transfer_test

import (
	"fmt"
	"hash/adler32"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Rucio's requests, as its FTS3 transfertool (lib/rucio/transfertool/
// fts3.py) makes them: version, whoami, a bulk submission in
// deterministic mode with its file metadata and per-file tokens
// (WebDAV storages named davs://), the bulk query with its files= list,
// priority update, cancel; with a job of alternative sources, a
// multihop job of two hops and a job whose destination token lacks the
// scope it needs. The storages take tokens only: every copy moved with
// the job's tokens.

// rucioFile is one transfer as _file_from_transfer writes it.
func rucioFile(rid, name string, srcs []string, dst string, data []byte, srcTok, dstTok string) map[string]any {
	adler := fmt.Sprintf("%08x", adler32.Checksum(data))
	toks := make([]string, len(srcs))
	for i := range toks {
		toks[i] = srcTok
	}
	return map[string]any{
		"sources":      srcs,
		"destinations": []string{dst},
		"metadata": map[string]any{
			"request_id": rid, "scope": "user.alice", "name": name, "activity": "User Subscriptions",
			"request_type": "TRANSFER", "src_type": "DISK", "dst_type": "DISK", "src_rse": "SITE_A", "dst_rse": "SITE_B",
			"src_rse_id": "0b9f1c0d2ab54c70a7cba1e70c0c4c5e", "dest_rse_id": "5a1d9c80e0e34b0b8f3d5d2b1f6d4c3a",
			"filesize": len(data), "md5": nil, "adler32": adler,
		},
		"filesize":           len(data),
		"checksum":           "ADLER32:" + adler,
		"selection_strategy": "orderly",
		"activity":           "User Subscriptions",
		"source_tokens":      toks,
		"destination_tokens": []string{dstTok},
	}
}

// rucioParams is build_job_params for a disk-to-disk path, in
// deterministic mode (conveyor.use_deterministic_id) with sid.
func rucioParams(sid string, multihop, multiSources bool) map[string]any {
	jm := map[string]any{"issuer": "rucio", "multi_sources": multiSources, "overwrite_when_only_on_disk": false}
	p := map[string]any{
		"account": "root", "verify_checksum": "both", "copy_pin_lifetime": 172800, "bring_online": nil,
		"job_metadata": jm, "overwrite": true, "overwrite_when_only_on_disk": false, "priority": 3,
		"s3alternate": true, "id_generator": "deterministic", "sid": sid,
	}
	if multihop {
		p["multihop"] = true
		jm["multihop"] = true
	}
	return p
}

// bulkFields is Rucio's bulk query's files= list.
const bulkFields = "file_state,dest_surl,finish_time,start_time,staging_start,staging_finished,reason,source_surl,file_metadata"

func TestRucioTransfertool(t *testing.T) {
	e := startFTS(t)
	srcRead := e.is.Token(t, "storage.read:/store offline_access", map[string]any{"sub": "rucio-robot"})
	dstWrite := e.is.Token(t, "storage.modify:/store storage.read:/store offline_access", map[string]any{"sub": "rucio-robot"})

	// version() and whoami().
	code, b := e.do(t, "GET", "/", e.robot, nil)
	v := decode[map[string]any](t, b)
	if code != 200 || v["api"].(map[string]any)["major"].(float64) != 3 {
		t.Fatalf("GET /: %d %s", code, b)
	}
	code, b = e.do(t, "GET", "/whoami", e.robot, nil)
	who := decode[struct {
		UserDN  string   `json:"user_dn"`
		DN      []string `json:"dn"`
		BaseID  string   `json:"base_id"`
		VOs     []string `json:"vos"`
		VOsID   []string `json:"vos_id"`
		DlgID   string   `json:"delegation_id"`
		Method  string   `json:"method"`
		VomsCrd []string `json:"voms_cred"`
	}](t, b)
	if code != 200 || who.UserDN != "rucio-robot" || who.VOs[0] != "atlas" || who.Method != "oauth2" || len(who.DlgID) != 16 || who.BaseID == "" {
		t.Fatalf("GET /whoami: %d %s", code, b)
	}
	// Rucio's __get_deterministic_id.
	expected := func(sid string) string {
		return uuid.NewSHA1(uuid.NewSHA1(uuid.MustParse(who.BaseID), []byte(who.VOs[0])), []byte(sid)).String()
	}

	// Job A: two files, deterministic.
	a1, a2 := []byte("first file of job A\n"), []byte(strings.Repeat("second file ", 5000))
	jobA := map[string]any{"files": []any{
		rucioFile("req-a1", "a1", []string{e.put(t, 0, "a/a1", a1)}, e.davs(1, "a/a1"), a1, srcRead, dstWrite),
		rucioFile("req-a2", "a2", []string{e.put(t, 0, "a/a2", a2)}, e.davs(1, "a/a2"), a2, srcRead, dstWrite),
	}, "params": rucioParams("req-a1", false, false)}
	code, b = e.do(t, "POST", "/jobs", e.robot, jobA)
	idA := decode[map[string]string](t, b)["job_id"]
	if code != 200 || idA != expected("req-a1") {
		t.Fatalf("submit A: %d %s, want job id %s", code, b, expected("req-a1"))
	}
	if code, b = e.do(t, "POST", "/jobs", e.robot, jobA); code != http.StatusConflict {
		t.Fatalf("submit A again (same sid): %d %s, want 409", code, b)
	}

	// Job B: one file, two sources, the first missing.
	bData := []byte("job B's file\n")
	jobB := map[string]any{"files": []any{
		rucioFile("req-b", "b", []string{e.davs(0, "b/missing"), e.put(t, 2, "b/b", bData)}, e.davs(1, "b/b"), bData, srcRead, dstWrite),
	}, "params": rucioParams("req-b", false, true)}
	code, b = e.do(t, "POST", "/jobs", e.robot, jobB)
	idB := decode[map[string]string](t, b)["job_id"]
	if code != 200 {
		t.Fatalf("submit B: %d %s", code, b)
	}

	// Job C: multihop, site 0 -> site 2 -> site 1.
	cData := []byte(strings.Repeat("hop data ", 20000))
	jobC := map[string]any{"files": []any{
		rucioFile("req-c", "c", []string{e.put(t, 0, "c/c", cData)}, e.davs(2, "c/c"), cData, srcRead, dstWrite),
		rucioFile("req-c", "c", []string{e.davs(2, "c/c")}, e.davs(1, "c/c"), cData, srcRead, dstWrite),
	}, "params": rucioParams("req-c", true, false)}
	code, b = e.do(t, "POST", "/jobs", e.robot, jobC)
	idC := decode[map[string]string](t, b)["job_id"]
	if code != 200 {
		t.Fatalf("submit C: %d %s", code, b)
	}

	// Job D: the destination's token may read only.
	dData := []byte("job D's file\n")
	jobD := map[string]any{"files": []any{
		rucioFile("req-d", "d", []string{e.put(t, 0, "d/d", dData)}, e.davs(1, "d/d"), dData, srcRead, srcRead),
	}, "params": rucioParams("req-d", false, false)}
	code, b = e.do(t, "POST", "/jobs", e.robot, jobD)
	idD := decode[map[string]string](t, b)["job_id"]
	if code != 200 {
		t.Fatalf("submit D: %d %s", code, b)
	}

	// bulk_query() until every job ended.
	type fileResp struct {
		State    string         `json:"file_state"`
		Dest     string         `json:"dest_surl"`
		Source   string         `json:"source_surl"`
		Start    *string        `json:"start_time"`
		Finish   *string        `json:"finish_time"`
		StStart  *string        `json:"staging_start"`
		StFinish *string        `json:"staging_finished"`
		Reason   *string        `json:"reason"`
		Metadata map[string]any `json:"file_metadata"`
	}
	type jobResp struct {
		JobID      string         `json:"job_id"`
		HTTPStatus string         `json:"http_status"`
		State      string         `json:"job_state"`
		Type       string         `json:"job_type"`
		Metadata   map[string]any `json:"job_metadata"`
		Files      []fileResp     `json:"files"`
	}
	var jobs []jobResp
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, b = e.do(t, "GET", "/jobs/"+strings.Join([]string{idA, idB, idC, idD, "lost-job"}, ",")+"?files="+bulkFields, e.robot, nil)
		if code != http.StatusMultiStatus {
			t.Fatalf("bulk query with an unknown id: %d, want 207: %s", code, b)
		}
		jobs = decode[[]jobResp](t, b)
		done := true
		for _, j := range jobs[:4] {
			done = done && (j.State == "FINISHED" || j.State == "FINISHEDDIRTY" || j.State == "FAILED" || j.State == "CANCELED")
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs not ended: %s", b)
		}
		time.Sleep(100 * time.Millisecond) // polling, as Rucio's poller does
	}
	if jobs[4].JobID != "lost-job" || jobs[4].HTTPStatus != "404 Not Found" {
		t.Errorf("the unknown job: %+v", jobs[4])
	}
	ftsTime := func(what string, s *string) time.Time {
		t.Helper()
		if s == nil {
			t.Fatalf("%s: null", what)
		}
		tm, err := time.Parse("2006-01-02T15:04:05", *s) // Rucio's strptime format
		if err != nil {
			t.Fatalf("%s %q: %v", what, *s, err)
		}
		return tm
	}
	a := jobs[0]
	if a.HTTPStatus != "200 Ok" || a.State != "FINISHED" || len(a.Files) != 2 || a.Metadata["issuer"] != "rucio" || a.Metadata["auth_method"] != "oauth2" {
		t.Fatalf("job A: %+v", a)
	}
	for i, f := range a.Files {
		if f.State != "FINISHED" || f.Metadata["request_id"] != []string{"req-a1", "req-a2"}[i] || f.StStart != nil || f.Reason != nil {
			t.Errorf("job A file %d: %+v", i, f)
		}
		if ftsTime("finish_time", f.Finish).Before(ftsTime("start_time", f.Start)) {
			t.Errorf("job A file %d ends before it starts: %s %s", i, *f.Start, *f.Finish)
		}
	}
	if e.read(1, "a/a1") != string(a1) || e.read(1, "a/a2") != string(a2) {
		t.Errorf("job A's files did not arrive")
	}
	// Job B: the first source FAILED, the second FINISHED (as Rucio reads
	// a multi-source job: NOT_USED skipped, the FINISHED one wins).
	bj := jobs[1]
	if bj.State != "FINISHED" || bj.Type != "R" || len(bj.Files) != 2 || bj.Files[0].State != "FAILED" || bj.Files[1].State != "FINISHED" ||
		bj.Files[0].Reason == nil || !strings.Contains(*bj.Files[0].Reason, "404") || bj.Files[1].Source != e.davs(2, "b/b") {
		t.Errorf("job B: %+v", bj)
	}
	if e.read(1, "b/b") != string(bData) {
		t.Errorf("job B's file did not arrive")
	}
	// Job C: each hop started after the previous one finished.
	c := jobs[2]
	if c.State != "FINISHED" || c.Type != "H" || len(c.Files) != 2 || c.Files[0].State != "FINISHED" || c.Files[1].State != "FINISHED" {
		t.Fatalf("job C: %+v", c)
	}
	if ftsTime("hop 1 start", c.Files[1].Start).Before(ftsTime("hop 0 finish", c.Files[0].Finish)) {
		t.Errorf("hop 1 started at %s, before hop 0 finished at %s", *c.Files[1].Start, *c.Files[0].Finish)
	}
	if e.read(2, "c/c") != string(cData) || e.read(1, "c/c") != string(cData) {
		t.Errorf("job C's hops did not arrive")
	}
	// Job D: FAILED, with a reason that says what the token lacks.
	d := jobs[3]
	if d.State != "FAILED" || d.Files[0].State != "FAILED" || d.Files[0].Reason == nil {
		t.Fatalf("job D: %+v", d)
	}
	t.Logf("job D's reason: %s", *d.Files[0].Reason)
	if r := *d.Files[0].Reason; !strings.HasPrefix(r, "permission: ") || !strings.Contains(r, "needs storage.create:/store/d/d") {
		t.Errorf("job D's reason does not say the scope missing: %s", r)
	}
	if e.read(1, "d/d") != "" {
		t.Errorf("job D's file arrived")
	}
	// Through wanda's API: job A's files were pulled by the destination.
	code, b = e.do(t, "GET", "/api/v1/jobs/"+idA+"/files", e.robot, nil)
	files := decode[struct{ Files []struct{ Mode string } }](t, b)
	if code != 200 || len(files.Files) != 2 || files.Files[0].Mode != "pull" || files.Files[1].Mode != "pull" {
		t.Errorf("job A's files' modes: %s", b)
	}

	// update_priority() and cancel() on a job that waits (its
	// destination banned with allow_submit).
	if code, b = e.do(t, "POST", "/ban/se", e.admin, map[string]any{"storage": "davs://127.0.0.1", "status": "wait", "allow_submit": true, "message": "downtime"}); code != 200 {
		t.Fatalf("ban: %d %s", code, b)
	}
	eData := []byte("job E\n")
	jobE := map[string]any{"files": []any{
		rucioFile("req-e", "e", []string{e.put(t, 0, "e/e", eData)}, e.davs(1, "e/e"), eData, srcRead, dstWrite),
	}, "params": rucioParams("req-e", false, false)}
	code, b = e.do(t, "POST", "/jobs", e.robot, jobE)
	idE := decode[map[string]string](t, b)["job_id"]
	if code != 200 {
		t.Fatalf("submit E: %d %s", code, b)
	}
	code, b = e.do(t, "POST", "/jobs/"+idE, e.robot, map[string]any{"params": map[string]any{"priority": 5}})
	if m := decode[map[string]any](t, b); code != 200 || m["priority"].(float64) != 5 || m["job_id"] != idE {
		t.Fatalf("update_priority: %d %s", code, b)
	}
	if code, b = e.do(t, "GET", "/jobs/"+idE+"?files=file_state", e.robot, nil); !strings.Contains(string(b), `"ON_HOLD"`) {
		t.Errorf("a job of a banned storage's: %d %s", code, b)
	}
	if code, b = e.do(t, "DELETE", "/jobs/"+idE, e.other, nil); code != http.StatusForbidden {
		t.Errorf("cancel by another identity: %d %s", code, b)
	}
	code, b = e.do(t, "DELETE", "/jobs/"+idE, e.robot, nil)
	if m := decode[map[string]any](t, b); code != 200 || m["job_state"] != "CANCELED" {
		t.Fatalf("cancel: %d %s", code, b)
	}
	if code, b = e.do(t, "DELETE", "/ban/se?storage=davs://127.0.0.1", e.robot, nil); code != http.StatusForbidden {
		t.Errorf("unban by a non-administrator: %d %s", code, b)
	}
	if code, b = e.do(t, "DELETE", "/ban/se?storage=davs://127.0.0.1", e.admin, nil); code != http.StatusNoContent {
		t.Errorf("unban: %d %s", code, b)
	}

	// No token in the service's log.
	for _, secret := range []string{srcRead, dstWrite, e.robot} {
		if strings.Contains(e.log.String(), secret) {
			t.Fatalf("a token is in the service's log")
		}
	}
}

package transfer_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// call sends a request to the env's API (anonymous: an open service).
func (e *env) call(t *testing.T, method, path string, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.api.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer not-checked-on-an-open-service")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// waitFTS polls GET /jobs/{id} until the job ends.
func (e *env) waitFTS(t *testing.T, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, b := e.call(t, "GET", "/jobs/"+id, "")
		var j map[string]any
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		if s, _ := j["job_state"].(string); store.JobState(s).Final() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not ended: %s", id, b)
		}
		time.Sleep(20 * time.Millisecond) // polling the service
	}
}

// jwt is an unsigned token with claims (the service reads exp only).
func jwt(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256"}`)) + "." + enc([]byte(claims)) + ".c2ln"
}

// What FTS3 refuses, and what it does not know, on POST /jobs: a refusal
// is a 400 with a message and queues nothing; parameters it does not know
// are ignored, as FTS3 does.
func TestFTSSubmissions(t *testing.T) {
	e := startEnv(t, nil)
	f := `{"sources": ["http://127.0.0.1:1/store/a"], "destinations": ["http://127.0.0.1:2/store/a"]}`
	expired := jwt(`{"exp": 1000000000}`)
	for _, tc := range []struct{ name, body, want string }{
		{"staging", `{"files": [` + f + `], "params": {"bring_online": 3600}}`, "no tape"},
		{"archiving", `{"files": [` + f + `], "params": {"archive_timeout": 600}}`, "no tape"},
		{"deletion", `{"files": [` + f + `], "delete": ["http://h/x"]}`, "not supported"},
		{"staging metadata", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b"], "staging_metadata": {"x": 1}}]}`, "no tape"},
		{"multihop with alternatives", `{"files": [{"sources": ["http://h/a", "http://i/a"], "destinations": ["http://h/b"]}], "params": {"multihop": true}}`, "exclude"},
		{"source tokens alone", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b"], "source_tokens": ["x"]}]}`, "both or neither"},
		{"too few source tokens", `{"files": [{"sources": ["http://h/a", "http://i/a"], "destinations": ["http://h/b"], "source_tokens": ["x"], "destination_tokens": ["y"]}]}`, "one per source"},
		{"tokens for root://", `{"files": [{"sources": ["root://h//a"], "destinations": ["http://h/b"], "source_tokens": ["x"], "destination_tokens": ["y"]}]}`, "root://"},
		{"an expired token", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b"], "source_tokens": ["` + expired + `"], "destination_tokens": ["y"]}]}`, "expired"},
		{"no sid", `{"files": [` + f + `], "params": {"id_generator": "deterministic"}}`, "sid"},
		{"a strategy FTS3 does not have", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b"], "selection_strategy": "random"}]}`, "selection_strategy"},
		{"verify_checksum", `{"files": [` + f + `], "params": {"verify_checksum": "sometimes"}}`, "verify_checksum"},
		{"overwrite_hop without multihop", `{"files": [` + f + `], "params": {"overwrite_hop": true}}`, "multihop"},
		{"a list for metadata", `{"files": [{"sources": ["http://h/a"], "destinations": ["http://h/b"], "metadata": [1]}]}`, "metadata"},
		{"gsiftp", `{"files": [{"sources": ["gsiftp://h/a"], "destinations": ["http://h/b"]}]}`, "scheme"},
		{"no files", `{"params": {}}`, "no transfers"},
		{"not JSON", `{"files": [`, "not a JSON object"},
	} {
		code, b := e.call(t, "POST", "/jobs", tc.body)
		var m map[string]string
		_ = json.Unmarshal(b, &m)
		if code != 400 || !strings.Contains(m["message"], tc.want) || !strings.HasPrefix(m["status"], "400") {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.name, code, b, tc.want)
		}
	}
	if js, err := e.st.ListJobs(context.Background(), store.JobQuery{}); err != nil || len(js) != 0 {
		t.Fatalf("%d jobs queued by refused submissions (%v)", len(js), err)
	}

	// What FTS3's command line sends by default, with parameters FTS3
	// does not know: taken.
	data := randomBytes(5000, 7)
	body := fmt.Sprintf(`{"files": [{"sources": [%q], "destinations": [%q], "checksum": "ADLER32", "filesize": null,
		"metadata": "a label", "activity": null, "scitag": null, "staging_metadata": null, "archive_metadata": null}],
		"params": {"checksum": "ADLER32", "overwrite": false, "overwrite_on_retry": false, "overwrite_when_only_on_disk": false,
		"overwrite_hop": false, "reuse": false, "job_metadata": null, "file_metadata": null, "gridftp": null, "spacetoken": null,
		"source_spacetoken": null, "verify_checksum": "n", "copy_pin_lifetime": -1, "bring_online": -1, "dst_file_report": false,
		"archive_timeout": -1, "timeout": null, "fail_nearline": false, "retry": 0, "priority": null, "multihop": false,
		"credential": null, "nostreams": null, "s3alternate": false, "ipv4": false, "ipv6": false, "buffer_size": null,
		"strict_copy": false, "disable_cleanup": false, "activity": null, "scitag": null, "unmanaged_tokens": false,
		"destination_spacetoken": null, "something_new": 1}, "delete": null}`,
		e.put(t, "cli/f", data), e.dst.URL+"/store/cli/f")
	code, b := e.call(t, "POST", "/jobs", body)
	if code != 200 {
		t.Fatalf("the command line's submission: %d %s", code, b)
	}
	id := decodeMap(t, b)["job_id"].(string)
	j := e.waitFTS(t, id)
	if j["job_state"] != "FINISHED" || j["verify_checksum"] != "n" || j["priority"].(float64) != 3 || j["job_type"] != "N" {
		t.Fatalf("job: %v", j)
	}
	e.sameFile(t, "cli/f", data)
	_, b = e.call(t, "GET", "/jobs/"+id+"/files", "")
	var fs []map[string]any
	if err := json.Unmarshal(b, &fs); err != nil || len(fs) != 1 {
		t.Fatalf("files: %s", b)
	}
	if fs[0]["file_metadata"].(map[string]any)["label"] != "a label" || fs[0]["checksum"] != "ADLER32" || fs[0]["filesize"].(float64) != 5000 ||
		fs[0]["file_state"] != "FINISHED" || fs[0]["activity"] != "default" {
		t.Errorf("file: %v", fs[0])
	}
	for _, k := range []string{"file_id", "file_index", "source_surl", "dest_surl", "start_time", "finish_time", "throughput", "tx_duration", "staging_start", "reason"} {
		if _, ok := fs[0][k]; !ok {
			t.Errorf("file: no %s: %v", k, fs[0])
		}
	}
	// One field of the job; its data management operations (none).
	if code, b = e.call(t, "GET", "/jobs/"+id+"/job_state", ""); code != 200 || string(bytes.TrimSpace(b)) != `"FINISHED"` {
		t.Errorf("GET /jobs/ID/job_state: %d %s", code, b)
	}
	if code, b = e.call(t, "GET", "/jobs/"+id+"/dm", ""); code != 200 || string(bytes.TrimSpace(b)) != `[]` {
		t.Errorf("GET /jobs/ID/dm: %d %s", code, b)
	}
	// Listing: ended jobs only with state_in and a limit.
	if _, b = e.call(t, "GET", "/jobs", ""); string(bytes.TrimSpace(b)) != "[]" {
		t.Errorf("active jobs: %s", b)
	}
	if _, b = e.call(t, "GET", "/jobs?state_in=FINISHED&limit=10&fields=job_id,job_state", ""); !bytes.Contains(b, []byte(id)) || bytes.Contains(b, []byte("user_dn")) {
		t.Errorf("finished jobs: %s", b)
	}
	if code, _ = e.call(t, "GET", "/jobs?limit=501", ""); code != 400 {
		t.Errorf("a limit over 500: %d", code)
	}
	// A job that ended: a cancel answers it as it is, "304 Not Modified" inside.
	if code, b = e.call(t, "DELETE", "/jobs/"+id, ""); code != 200 || decodeMap(t, b)["http_status"] != "304 Not Modified" || decodeMap(t, b)["job_state"] != "FINISHED" {
		t.Errorf("cancel of an ended job: %d %s", code, b)
	}
	if code, b = e.call(t, "GET", "/jobs/nope", ""); code != 404 || decodeMap(t, b)["http_status"] != "404 Not Found" {
		t.Errorf("an unknown job: %d %s", code, b)
	}
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return m
}

// Storage configuration bounds the transfers into a storage (no two of
// the job's files overlap with inbound_max_active 1); a ban with status
// cancel moves a file of alternative sources on to another storage and
// cancels the others; files can be canceled one by one.
func TestFTSStorages(t *testing.T) {
	e := startEnv(t, nil)
	dstSE := "http://127.0.0.1"
	code, b := e.call(t, "POST", "/config/se", `{"`+dstSE+`": {"se_info": {"inbound_max_active": 1, "outbound_max_active": null}}}`)
	if code != 200 {
		t.Fatalf("POST /config/se: %d %s", code, b)
	}
	if code, b = e.call(t, "POST", "/config/se", `{"x": {"se_info": {"no_such_thing": 1}}}`); code != 400 {
		t.Errorf("an unknown setting: %d %s", code, b)
	}
	_, b = e.call(t, "GET", "/config/se", "")
	if v := decodeMap(t, b)[dstSE].(map[string]any)["se_info"].(map[string]any); v["inbound_max_active"].(float64) != 1 || v["outbound_max_active"] != nil {
		t.Fatalf("GET /config/se: %s", b)
	}
	var files []string
	for i := range 8 {
		name := fmt.Sprintf("cap/f%d", i)
		files = append(files, fmt.Sprintf(`{"sources": [%q], "destinations": [%q]}`, e.put(t, name, randomBytes(200<<10, uint64(i))), e.dst.URL+"/store/"+name))
	}
	code, b = e.call(t, "POST", "/jobs", `{"files": [`+strings.Join(files, ",")+`]}`)
	if code != 200 {
		t.Fatal(code, string(b))
	}
	id := decodeMap(t, b)["job_id"].(string)
	if j := e.waitFTS(t, id); j["job_state"] != "FINISHED" {
		t.Fatalf("job: %v", j)
	}
	as, err := e.st.Attempts(context.Background(), id)
	if err != nil || len(as) != 8 {
		t.Fatalf("attempts: %v %v", as, err)
	}
	sort.Slice(as, func(i, k int) bool { return as[i].Start.Before(as[k].Start) })
	for i := 1; i < len(as); i++ {
		if as[i].Start.Before(as[i-1].End) {
			t.Errorf("two transfers into the storage at once with inbound_max_active 1: %v-%v and %v-%v",
				as[i-1].Start, as[i-1].End, as[i].Start, as[i].End)
		}
	}
	if code, _ = e.call(t, "DELETE", "/config/se?se="+dstSE, ""); code != 204 {
		t.Errorf("DELETE /config/se: %d", code)
	}

	// A ban with status cancel of "dav://127.0.0.1": a file there with
	// another source moves on to it, a file there alone is canceled.
	// Both storages are banned with wait first (submissions taken), so
	// that the files wait on their first source.
	alt := e.put(t, "ban/alt", []byte("alternative"))
	onlyBanned := "dav://" + strings.TrimPrefix(e.src.URL, "http://") + "/store/ban/only"
	e.put(t, "ban/only", []byte("only"))
	for _, se := range []string{"dav://127.0.0.1", "http://127.0.0.1"} {
		if code, b = e.call(t, "POST", "/ban/se", `{"storage": "`+se+`", "status": "wait", "allow_submit": true}`); code != 200 {
			t.Fatalf("ban wait: %d %s", code, b)
		}
	}
	code, b = e.call(t, "POST", "/jobs", fmt.Sprintf(`{"files": [{"sources": [%q, %q], "destinations": [%q], "selection_strategy": "orderly"}]}`,
		"dav://"+strings.TrimPrefix(alt, "http://"), alt, e.dst.URL+"/store/ban/alt"))
	if code != 200 {
		t.Fatalf("submit: %d %s", code, b)
	}
	idAlt := decodeMap(t, b)["job_id"].(string)
	code, b = e.call(t, "POST", "/jobs", fmt.Sprintf(`{"files": [{"sources": [%q], "destinations": [%q]}]}`, onlyBanned, e.dst.URL+"/store/ban/only"))
	if code != 200 {
		t.Fatalf("submit: %d %s", code, b)
	}
	idOnly := decodeMap(t, b)["job_id"].(string)
	if code, _ = e.call(t, "DELETE", "/ban/se?storage=http://127.0.0.1", ""); code != 204 {
		t.Fatalf("unban: %d", code)
	}
	_, b = e.call(t, "GET", "/jobs/"+idAlt+","+idOnly+"?files=file_state,source_surl", "")
	if strings.Count(string(b), `"ON_HOLD"`) != 2 || strings.Count(string(b), `"NOT_USED"`) != 1 {
		t.Fatalf("files of a storage banned with wait: %s", b)
	}
	code, b = e.call(t, "POST", "/ban/se", `{"storage": "dav://127.0.0.1", "status": "cancel", "message": "gone"}`)
	var affected []string
	if err := json.Unmarshal(b, &affected); code != 200 || err != nil || len(affected) != 2 {
		t.Fatalf("ban cancel: %d %s", code, b)
	}
	if j := e.waitFTS(t, idAlt); j["job_state"] != "FINISHED" {
		t.Errorf("the job with another source: %v", j)
	}
	e.sameFile(t, "ban/alt", []byte("alternative"))
	if j := e.waitFTS(t, idOnly); j["job_state"] != "CANCELED" {
		t.Errorf("the job at the banned storage alone: %v", j)
	}
	_, b = e.call(t, "GET", "/ban/se", "")
	var bans []map[string]any
	if err := json.Unmarshal(b, &bans); err != nil || len(bans) != 1 || bans[0]["status"] != "CANCEL" || bans[0]["message"] != "gone" || bans[0]["se"] != "dav://127.0.0.1" {
		t.Errorf("GET /ban/se: %s", b)
	}
	code, b = e.call(t, "POST", "/jobs", fmt.Sprintf(`{"files": [{"sources": [%q], "destinations": [%q]}]}`, onlyBanned, e.dst.URL+"/store/ban/x"))
	if code != http.StatusForbidden || !bytes.Contains(b, []byte("is banned")) {
		t.Errorf("a submission from a banned storage: %d %s", code, b)
	}
	if code, _ = e.call(t, "DELETE", "/ban/se?storage=dav://127.0.0.1", ""); code != 204 {
		t.Errorf("unban: %d", code)
	}

	// Files canceled one by one: the job ends CANCELED when none is left.
	code, b = e.call(t, "POST", "/ban/se", `{"storage": "dav://127.0.0.1", "status": "wait", "allow_submit": true}`)
	if code != 200 {
		t.Fatal(code, string(b))
	}
	code, b = e.call(t, "POST", "/jobs", fmt.Sprintf(`{"files": [{"sources": [%q], "destinations": [%q]}, {"sources": [%q], "destinations": [%q]}]}`,
		onlyBanned, e.dst.URL+"/store/c/0", onlyBanned, e.dst.URL+"/store/c/1"))
	if code != 200 {
		t.Fatal(code, string(b))
	}
	idC := decodeMap(t, b)["job_id"].(string)
	if code, b = e.call(t, "DELETE", "/jobs/"+idC+"/files/1,7", ""); code != 200 || !bytes.Contains(b, []byte(`"CANCELED"`)) || !bytes.Contains(b, []byte("does not belong")) {
		t.Errorf("cancel files 1 and 7: %d %s", code, b)
	}
	if code, b = e.call(t, "DELETE", "/jobs/"+idC+"/files/0", ""); code != 200 || string(bytes.TrimSpace(b)) != `"CANCELED"` {
		t.Errorf("cancel file 0: %d %s", code, b)
	}
	if j := e.waitFTS(t, idC); j["job_state"] != "CANCELED" {
		t.Errorf("a job whose files were all canceled: %v", j)
	}
	if code, _ = e.call(t, "DELETE", "/jobs/"+idAlt+"/files/0", ""); code != 400 {
		t.Errorf("cancel a file of a job of alternatives: %d", code)
	}
}

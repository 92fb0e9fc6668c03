package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/adler32"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// The transfers experiment's API phases (issue 27): the same small files
// moved twice more, in Rucio-sized jobs, once submitted with wanda's own
// command line (`wanda transfer submit --file`, one process per job, the
// end seen as `wanda transfer list` sees it), once through FTS3's REST
// API as Rucio's FTS3 transfertool submits them (POST /jobs with its file
// metadata, checksums and parameters), followed by its bulk queries (GET
// /jobs/ID,...?files=... of the jobs not ended, every poll interval, at
// most 100 ids a query) and the end seen by FTS3's listing. Same files, same
// job sizes, same checksums: the API's cost is the difference.

// transfersAPIGoal is issue 27's: the FTS3 API path within 10% of the
// command line's.
const transfersAPIGoal = 1.10

// transfersPath is how a phase's jobs reach the service and how their
// end is seen.
type transfersPath struct {
	name   string
	submit func(ctx context.Context, req transfer.SubmitRequest) (string, error)
	open   func(ctx context.Context, ids []string) (bool, error)
	states func(ctx context.Context, ids []string) (map[store.FileState]int, error)
	// poll, if set, runs every pollEvery (a client's progress queries).
	poll      func(ctx context.Context, ids []string) error
	pollEvery time.Duration
}

// apiPath is wanda's API, from this process.
func (e *transfersEnv) apiPath() transfersPath {
	return transfersPath{name: "wanda API", submit: e.submit, open: e.open, states: e.states}
}

// cliPath submits with `wanda transfer submit --file` (a process per job).
func (e *transfersEnv) cliPath() transfersPath {
	dir := filepath.Join(e.r.Dir(), "cli-jobs")
	n := 0
	return transfersPath{name: "wanda transfer submit", open: e.open, states: e.states,
		submit: func(ctx context.Context, req transfer.SubmitRequest) (string, error) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", err
			}
			n++
			f := filepath.Join(dir, fmt.Sprintf("job%03d.json", n))
			b, err := json.Marshal(req)
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(f, b, 0o644); err != nil {
				return "", err
			}
			out, err := exec.CommandContext(ctx, e.r.Wanda(), "transfer", "submit", "--server", e.svc, "--file", f).CombinedOutput()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if err != nil || len(lines) == 0 {
				return "", fmt.Errorf("wanda transfer submit: %v: %s", err, out)
			}
			return lines[len(lines)-1], nil
		}}
}

// rucioFields is Rucio's bulk query's files= list.
const rucioFields = "file_state,dest_surl,finish_time,start_time,staging_start,staging_finished,reason,source_surl,file_metadata"

// ftsPath is FTS3's API as Rucio uses it.
func (e *transfersEnv) ftsPath() transfersPath {
	ended := map[string]bool{}
	jobs := 0
	return transfersPath{name: "FTS3 API (Rucio's requests)", pollEvery: e.r.Duration("poll"),
		submit: func(ctx context.Context, req transfer.SubmitRequest) (string, error) {
			jobs++
			var out struct {
				ID string `json:"job_id"`
			}
			err := e.ftsCall(ctx, http.MethodPost, "/jobs", rucioJob(req, jobs), &out)
			if err == nil && out.ID == "" {
				err = fmt.Errorf("POST /jobs: no job id")
			}
			return out.ID, err
		},
		open: func(ctx context.Context, ids []string) (bool, error) {
			var open []struct {
				ID string `json:"job_id"`
			}
			if err := e.ftsCall(ctx, http.MethodGet, "/jobs?state_in=SUBMITTED,READY,ACTIVE&fields=job_id", nil, &open); err != nil {
				return false, err
			}
			return slices.ContainsFunc(open, func(j struct {
				ID string `json:"job_id"`
			}) bool {
				return slices.Contains(ids, j.ID)
			}), nil
		},
		poll: func(ctx context.Context, ids []string) error {
			var left []string
			for _, id := range ids {
				if !ended[id] {
					left = append(left, id)
				}
			}
			for len(left) > 0 {
				batch := left[:min(100, len(left))]
				left = left[len(batch):]
				js, err := e.bulkQuery(ctx, batch, rucioFields)
				if err != nil {
					return err
				}
				for _, j := range js {
					if store.JobState(j.State).Final() {
						ended[j.ID] = true
					}
				}
			}
			return nil
		},
		states: func(ctx context.Context, ids []string) (map[store.FileState]int, error) {
			sum := map[store.FileState]int{}
			for len(ids) > 0 {
				batch := ids[:min(100, len(ids))]
				ids = ids[len(batch):]
				js, err := e.bulkQuery(ctx, batch, "file_state")
				if err != nil {
					return nil, err
				}
				for _, j := range js {
					for _, f := range j.Files {
						sum[store.FileState(f.State)]++
					}
				}
			}
			return sum, nil
		}}
}

// bulkJob is a job in a bulk query's answer.
type bulkJob struct {
	ID    string `json:"job_id"`
	State string `json:"job_state"`
	Files []struct {
		State string `json:"file_state"`
	} `json:"files"`
}

// bulkQuery is Rucio's bulk query of ids with the files' fields.
func (e *transfersEnv) bulkQuery(ctx context.Context, ids []string, fields string) ([]bulkJob, error) {
	var js []bulkJob
	path := "/jobs/" + strings.Join(ids, ",") + "?files=" + url.QueryEscape(fields)
	if len(ids) == 1 {
		var j bulkJob
		err := e.ftsCall(ctx, http.MethodGet, path, nil, &j)
		return []bulkJob{j}, err
	}
	return js, e.ftsCall(ctx, http.MethodGet, path, nil, &js)
}

// ftsCall sends one request to FTS3's API and decodes the answer.
func (e *transfersEnv) ftsCall(ctx context.Context, method, path string, body, out any) error {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	var hr *http.Request
	var err error
	if rd != nil {
		hr, err = http.NewRequestWithContext(ctx, method, e.svc+path, rd)
	} else {
		hr, err = http.NewRequestWithContext(ctx, method, e.svc+path, nil)
	}
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusMultiStatus {
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return fmt.Errorf("%s %s: %s %v", method, path, resp.Status, m["message"])
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// rucioJob is req as Rucio's transfertool writes a job of disk-to-disk
// transfers (_file_from_transfer, build_job_params).
func rucioJob(req transfer.SubmitRequest, n int) map[string]any {
	files := make([]any, len(req.Files))
	for i, f := range req.Files {
		_, sum, _ := strings.Cut(f.Checksum, ":")
		name := f.Destinations[0][strings.LastIndexByte(f.Destinations[0], '/')+1:]
		var size int64
		if f.Filesize != nil {
			size = *f.Filesize
		}
		files[i] = map[string]any{
			"sources": f.Sources, "destinations": f.Destinations,
			"metadata": map[string]any{"request_id": fmt.Sprintf("%032x", n*100000+i), "scope": "bench", "name": name,
				"activity": "Data Consolidation", "request_type": "TRANSFER", "src_type": "DISK", "dst_type": "DISK",
				"src_rse": "SOURCE", "dst_rse": "DESTINATION", "src_rse_id": "source", "dest_rse_id": "destination",
				"filesize": size, "md5": nil, "adler32": sum},
			"filesize": size, "checksum": "ADLER32:" + sum, "selection_strategy": "orderly", "activity": "Data Consolidation",
		}
	}
	return map[string]any{"files": files, "params": map[string]any{
		"account": "bench", "verify_checksum": "both", "copy_pin_lifetime": 172800, "bring_online": nil,
		"job_metadata": map[string]any{"issuer": "rucio", "multi_sources": false, "overwrite_when_only_on_disk": false},
		"overwrite":    true, "overwrite_when_only_on_disk": false, "priority": 3, "s3alternate": true,
	}}
}

// pathPhases moves the small files again through both paths, jobs of
// job_files files with their adler32, rounds times, alternating which
// goes first.
func (e *transfersEnv) pathPhases(ctx context.Context, small int, size int64) error {
	r := e.r
	per, rounds := r.Int("job_files"), r.Int("rounds")
	if per <= 0 || rounds <= 0 {
		return nil
	}
	sums := make([]string, small)
	buf := make([]byte, size)
	for i := range small {
		for k := range buf {
			buf[k] = byte(i*31 + k*7) // as transfersFiles writes them
		}
		sums[i] = fmt.Sprintf("%08x", adler32.Checksum(buf))
	}
	jobs := func(dir string) []transfer.SubmitRequest {
		var out []transfer.SubmitRequest
		for i := 0; i < small; i += per {
			req := transfer.SubmitRequest{Params: store.Params{VerifyChecksum: "both", Overwrite: true}}
			for k := i; k < min(small, i+per); k++ {
				f := e.file("small", k)
				f.Destinations = []string{fmt.Sprintf("%s/fast/%s/f%05d", e.dst, dir, k)}
				f.Checksum, f.Filesize = "adler32:"+sums[k], &size
				req.Files = append(req.Files, f)
			}
			out = append(out, req)
		}
		return out
	}
	r.Note("API phases: the %d small files again in jobs of %d files with their adler32 and verify_checksum both, through `wanda transfer submit --file` (a process per job; the end seen by listing the open jobs every 100 ms, as `wanda transfer list`) and through FTS3's POST /jobs as Rucio submits them (its bulk query of the open jobs with files=%s every %v, at most 100 ids a query, as Rucio's poller asks (it asks for jobs not updated for 60 s); the end seen by GET /jobs?state_in=SUBMITTED,READY,ACTIVE every 100 ms); %d round(s), alternating which path goes first", small, per, rucioFields, r.Duration("poll"), rounds)
	for round := range rounds {
		paths := []transfersPath{e.cliPath(), e.ftsPath()}
		if round%2 == 1 {
			paths[0], paths[1] = paths[1], paths[0]
		}
		for _, p := range paths {
			dir := fmt.Sprintf("%s%d", strings.Fields(p.name)[0], round)
			if err := e.phase(ctx, "small files, "+p.name, p, jobs(dir), int64(small)*size, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// transfersAPISummary compares the paths' times.
func transfersAPISummary(rows []Row) string {
	secs := map[string][]float64{}
	for _, row := range rows {
		if row.Get("kind") != "phase" || !strings.HasPrefix(fmt.Sprint(row.Get("phase")), "small files, ") {
			continue
		}
		s, _ := toFloat(row.Get("seconds"))
		secs[fmt.Sprint(row.Get("path"))] = append(secs[fmt.Sprint(row.Get("path"))], s)
	}
	cli, fts := secs["wanda transfer submit"], secs["FTS3 API (Rucio's requests)"]
	if len(cli) == 0 || len(cli) != len(fts) {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| round | wanda transfer submit s | FTS3 API (Rucio's requests) s | FTS3 / CLI | goal |\n|---|---|---|---|---|\n")
	var sc, sf float64
	for i := range cli {
		ratio := fts[i] / cli[i]
		sc, sf = sc+cli[i], sf+fts[i]
		verdict := "met"
		if ratio > transfersAPIGoal {
			verdict = "NOT met"
		}
		fmt.Fprintf(&b, "| %d | %.2f | %.2f | %.3f | <= %.2f: %s |\n", i+1, cli[i], fts[i], ratio, transfersAPIGoal, verdict)
	}
	if len(cli) > 1 {
		fmt.Fprintf(&b, "| all | %.2f | %.2f | %.3f | <= %.2f |\n", sc, sf, sf/sc, transfersAPIGoal)
	}
	return b.String()
}

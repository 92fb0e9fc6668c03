package transfer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
)

// benchAPI is the service's API on SQLite, its scheduler not running.
func benchAPI(b *testing.B) *httptest.Server {
	b.Helper()
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "t.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	svc, err := transfer.New(transfer.Options{Store: st, Client: engine()})
	if err != nil {
		b.Fatal(err)
	}
	api := httptest.NewServer(svc.Handler(nil))
	b.Cleanup(api.Close)
	return api
}

// BenchmarkSubmit measures the API's submissions of 10-file jobs on
// SQLite, through HTTP (the scheduler is not running: the jobs stay
// queued), with 8 clients at once. The goal: >= 1000 jobs/s.
func BenchmarkSubmit(b *testing.B) {
	api := benchAPI(b)
	var req transfer.SubmitRequest
	for i := range 10 {
		req.Files = append(req.Files, transfer.FileRequest{
			Sources:      []string{fmt.Sprintf("https://site-a.example:1094/store/run1/f%02d.root", i)},
			Destinations: []string{fmt.Sprintf("https://site-b.example:1094/store/run1/f%02d.root", i)},
		})
	}
	body, _ := json.Marshal(req)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.SetParallelism(4) // 4 x GOMAXPROCS clients
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := hc.Post(api.URL+"/api/v1/jobs", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// rucioBody is a job of n files as Rucio submits them (metadata,
// checksums, its parameters), from site-a to site-b.
func rucioBody(n, job int) []byte {
	files := make([]any, n)
	for i := range files {
		files[i] = map[string]any{
			"sources":      []string{fmt.Sprintf("davs://site-a.example:1094/store/run%d/f%04d.root", job, i)},
			"destinations": []string{fmt.Sprintf("davs://site-b.example:1094/store/run%d/f%04d.root", job, i)},
			"metadata": map[string]any{"request_id": fmt.Sprintf("%032x", job*100000+i), "scope": "bench", "name": fmt.Sprintf("f%04d.root", i),
				"activity": "Data Consolidation", "request_type": "TRANSFER", "src_type": "DISK", "dst_type": "DISK",
				"src_rse": "SITE_A", "dst_rse": "SITE_B", "src_rse_id": "a", "dest_rse_id": "b", "filesize": 65536, "md5": nil, "adler32": "0a1b2c3d"},
			"filesize": 65536, "checksum": "ADLER32:0a1b2c3d", "selection_strategy": "orderly", "activity": "Data Consolidation",
		}
	}
	b, _ := json.Marshal(map[string]any{"files": files, "params": map[string]any{
		"account": "bench", "verify_checksum": "both", "copy_pin_lifetime": 172800, "bring_online": nil,
		"job_metadata": map[string]any{"issuer": "rucio", "multi_sources": false, "overwrite_when_only_on_disk": false},
		"overwrite":    true, "priority": 3, "s3alternate": true,
	}})
	return b
}

// v1Body is the same job as wanda's command line writes it.
func v1Body(n, job int) []byte {
	var req transfer.SubmitRequest
	size := int64(65536)
	for i := range n {
		req.Files = append(req.Files, transfer.FileRequest{
			Sources:      []string{fmt.Sprintf("https://site-a.example:1094/store/run%d/f%04d.root", job, i)},
			Destinations: []string{fmt.Sprintf("https://site-b.example:1094/store/run%d/f%04d.root", job, i)},
			Checksum:     "adler32:0a1b2c3d", Filesize: &size,
		})
	}
	req.Params.VerifyChecksum, req.Params.Overwrite = "both", true
	b, _ := json.Marshal(req)
	return b
}

// BenchmarkSubmitPaths: a Rucio-sized job (200 files) through FTS3's
// POST /jobs as Rucio writes it, and through wanda's POST /api/v1/jobs
// as its command line does; one client, SQLite, the scheduler not
// running.
func BenchmarkSubmitPaths(b *testing.B) {
	for _, p := range []struct {
		name, path string
		body       func(n, job int) []byte
	}{{"fts3", "/jobs", rucioBody}, {"v1", "/api/v1/jobs", v1Body}} {
		b.Run(p.name, func(b *testing.B) {
			api := benchAPI(b)
			bodies := make([][]byte, 64)
			for i := range bodies {
				bodies[i] = p.body(200, i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				resp, err := http.Post(api.URL+p.path, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode >= 300 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.ReportMetric(float64(b.N*200)/b.Elapsed().Seconds(), "files/s")
		})
	}
}

// BenchmarkBulkQuery: Rucio's bulk query (its files= list) of 50 jobs of
// 200 files, against wanda's listing of the open jobs (what `wanda
// transfer list` asks).
func BenchmarkBulkQuery(b *testing.B) {
	api := benchAPI(b)
	var ids []string
	for i := range 50 {
		resp, err := http.Post(api.URL+"/jobs", "application/json", bytes.NewReader(rucioBody(200, i)))
		if err != nil {
			b.Fatal(err)
		}
		var m map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		ids = append(ids, m["job_id"])
	}
	for _, q := range []struct{ name, path string }{
		{"fts3-bulk", "/jobs/" + strings.Join(ids, ",") + "?files=file_state,dest_surl,finish_time,start_time,staging_start,staging_finished,reason,source_surl,file_metadata"},
		{"fts3-list", "/jobs?state_in=SUBMITTED,READY,ACTIVE&fields=job_id"},
		{"v1-list", "/api/v1/jobs?state=SUBMITTED,ACTIVE&limit=10000"},
	} {
		b.Run(q.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				resp, err := http.Get(api.URL + q.path)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				b.SetBytes(n)
			}
		})
	}
}

package transfer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
)

// BenchmarkSubmit measures the API's submissions of 10-file jobs on
// SQLite, through HTTP (the scheduler is not running: the jobs stay
// queued), with 8 clients at once. The goal: >= 1000 jobs/s.
func BenchmarkSubmit(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "t.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	svc, err := transfer.New(transfer.Options{Store: st, Client: engine()})
	if err != nil {
		b.Fatal(err)
	}
	api := httptest.NewServer(svc.Handler(nil))
	defer api.Close()
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

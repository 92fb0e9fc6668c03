package transfer_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Every attempt at a file is a record: a finished copy with its bytes,
// a failed one (a missing source) with its error class.
func TestTransferRecords(t *testing.T) {
	rf := filepath.Join(t.TempDir(), "records.jsonl")
	rec, err := monitor.New(monitor.Options{Role: "transfer", File: monitor.FileOptions{Path: rf},
		Metrics: metrics.NewRecords(prometheus.NewRegistry(), "transfer")})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	e := startEnv(t, func(o *transfer.Options) { o.Records = rec })
	data := randomBytes(100000, 7)
	var req transfer.SubmitRequest
	req.Files = []transfer.FileRequest{
		{Sources: []string{e.put(t, "ok.bin", data)}, Destinations: []string{e.dst.URL + "/store/ok.bin"}},
		{Sources: []string{e.src.URL + "/store/missing.bin"}, Destinations: []string{e.dst.URL + "/store/missing.bin"}},
	}
	if j := e.wait(t, e.submit(t, req), time.Minute); j.State != store.JobFinishedDirty {
		t.Fatalf("job %s: %v", j.State, j.Files)
	}
	var ok, failed *monitor.Record
	deadline := time.Now().Add(10 * time.Second)
	for ok == nil || failed == nil {
		if time.Now().After(deadline) {
			t.Fatalf("records: ok %v, failed %v", ok, failed)
		}
		time.Sleep(10 * time.Millisecond)
		b, _ := os.ReadFile(rf)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var r monitor.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			switch r.Path {
			case "/store/ok.bin":
				ok = &r
			case "/store/missing.bin":
				failed = &r
			}
		}
	}
	if ok.Type != monitor.TypeTransfer || ok.Result != "ok" || ok.BytesWritten != int64(len(data)) || ok.BytesRead != int64(len(data)) ||
		ok.Destination != e.dst.URL+"/store/ok.bin" || ok.Mode == "" || ok.Protocol != "http" || ok.Role != "transfer" {
		t.Errorf("finished transfer record: %+v", ok)
	}
	if failed.Result != "error" || failed.ErrorClass != transfer.ClassSourceMissing {
		t.Errorf("failed transfer record: %+v", failed)
	}
}

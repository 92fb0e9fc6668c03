package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// The metrics count requests by name and result (unknown request IDs in
// one bounded "unknown" series), the bytes both ways, connections and
// open files.
func TestMetrics(t *testing.T) {
	m := metrics.NewXRootD(prometheus.NewRegistry(), "server")
	ts := startServer(t, func(o *Options) { o.Metrics = m })
	data := ts.writeFile(t, "f", 100000)
	rc := dialRaw(t, ts.addr).login()
	h := rc.open("/store/f", xrootd.OpenRead)
	if got := testutil.ToFloat64(m.OpenFiles); got != 1 {
		t.Errorf("open files %v, want 1", got)
	}
	body := xrootd.ReadRequest{Handle: h, Offset: 0, Length: int32(len(data))}.Body()
	rc.mustOK(xrootd.ReqRead, body, nil)
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqStat, [16]byte{}, []byte("/store/none"))
	rc.mustFail(xrootd.CodeInvalidRequest, xrootd.RequestID(3999), [16]byte{}, nil)
	rc.mustFail(xrootd.CodeInvalidRequest, xrootd.RequestID(2999), [16]byte{}, nil)
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	// A request is counted once its answer is out, by the goroutine that
	// sent it, which may run after the client has its answer and sent
	// the next request: poll until every count is in.
	want := []struct {
		req, result string
		want        float64
	}{
		{"kXR_open", "ok", 1}, {"kXR_read", "ok", 1}, {"kXR_close", "ok", 1},
		{"kXR_stat", "kXR_NotFound", 1}, {"unknown", "kXR_InvalidRequest", 2},
	}
	counted := func() bool {
		for _, c := range want {
			if testutil.ToFloat64(m.Requests.WithLabelValues(c.req, c.result)) != c.want {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(5 * time.Second)
	for !counted() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for _, c := range want {
		if got := testutil.ToFloat64(m.Requests.WithLabelValues(c.req, c.result)); got != c.want {
			t.Errorf("requests{%s,%s} = %v, want %v", c.req, c.result, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.OpenFiles); got != 0 {
		t.Errorf("open files %v after close, want 0", got)
	}
	if got := testutil.ToFloat64(m.BytesOut); got < float64(len(data)) {
		t.Errorf("sent %v bytes, at least the file's %d expected", got, len(data))
	}
	if got := testutil.ToFloat64(m.BytesIn); got < 24*7 {
		t.Errorf("received %v bytes for 7 requests", got)
	}
	if got := testutil.ToFloat64(m.Connections); got != 1 {
		t.Errorf("connections %v, want 1", got)
	}
	rc.c.Close()
	deadline = time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.Connections) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("connections %v after the client left", testutil.ToFloat64(m.Connections))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package bench_test

import (
	"fmt"
	"testing"
	"time"
)

// TestTPCQuick runs the tpc experiment's quick preset on a small file
// and checks that every line was produced with a plausible rate: wanda's
// pulls at each stream count, XrdHttpTPC with and without streams,
// xrdcp --tpc, at both RTTs.
func TestTPCQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the tpc experiment takes half a minute")
	}
	for _, p := range []string{"xrootd", "xrdcp"} {
		needPeer(t, p)
	}
	r, _ := executeQuick(t, "tpc", 5*time.Minute, map[string]string{"size": "8MB"})
	got := map[string]float64{}
	for _, row := range r.Rows() {
		k := fmt.Sprintf("%v %v %vms %v", row.Get("server"), row.Get("mode"), row.Get("rtt_ms"), row.Get("streams"))
		v, _ := row.Get("of_link").(float64)
		got[k] = v
	}
	for _, rtt := range []string{"0ms", "20ms"} {
		for _, line := range []string{"wanda http-tpc %[1]s 1", "wanda http-tpc %[1]s 4", "xrootd http-tpc %[1]s 0", "xrootd http-tpc %[1]s 4", "xrootd xrdcp-tpc %[1]s 1"} {
			k := fmt.Sprintf(line, rtt)
			v, ok := got[k]
			if !ok {
				t.Errorf("no row %q (rows: %v)", k, got)
			} else if v <= 0 || v > 1.2 {
				t.Errorf("%q: %v of the link", k, v)
			}
		}
	}
}

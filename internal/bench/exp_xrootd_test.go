package bench

import (
	"os/exec"
	"strings"
	"testing"
)

// TestXRootDQuick runs the xrootd experiment with tiny parameters: wanda's
// lines always, XRootD's (and xrdcp's, the Python bindings') when
// installed and runnable here.
func TestXRootDQuick(t *testing.T) {
	// The wanda server is a child: this test binary plays `wanda server`.
	t.Setenv(fakeWandaEnv, "1")
	r := netExecute(t, "xrootd", map[string]string{
		"size": "8MiB", "streams": "1 2", "readv_time": "300ms", "readv_segs": "64",
	})
	rows := r.Rows()
	for _, row := range rows {
		t.Log(row.Cols, row.Vals)
	}
	for _, s := range []int{1, 2} {
		if got := selectRows(rows, "test", "copy", "client", "wanda cp", "streams", s, "server", "wanda"); len(got) != 1 {
			t.Errorf("wanda cp --streams %d from wanda: %d rows, want 1", s, len(got))
		}
	}
	if got := selectRows(rows, "test", "readv", "client", "wanda", "server", "wanda"); len(got) != 1 {
		t.Fatalf("readv wanda against wanda: %d rows, want 1", len(got))
	} else if rps := netFloat(t, got[0], "req_s"); rps <= 0 {
		t.Errorf("readv wanda against wanda: %.1f requests/s", rps)
	}
	for _, row := range rows {
		if row.Get("test") == "copy" && netFloat(t, row, "mb_s") <= 0 {
			t.Errorf("%v: no rate", row.Vals)
		}
	}
	haveXrd := len(selectRows(rows, "server", "xrootd")) > 0
	if !haveXrd {
		t.Log("no XRootD rows (xrootd not installed or not runnable here)")
		return
	}
	for _, row := range selectRows(rows, "server", "wanda") {
		if v, ok := toFloat(row.Get("vs_xrootd")); !ok || v <= 0 {
			t.Errorf("%v: no ratio to XRootD", row.Vals)
		}
	}
	if _, err := exec.LookPath("xrdcp"); err == nil {
		for _, env := range []string{"-", "XRD_CPUSEPGWRTRD=0"} {
			if got := selectRows(rows, "test", "copy", "client", "xrdcp", "env", env, "server", "xrootd"); len(got) != 2 {
				t.Errorf("xrdcp (env %s) from xrootd: %d rows, want 2 (1 and 2 streams)", env, len(got))
			}
		}
	}
	var sum string
	r.mu.Lock()
	sum = strings.Join(r.summary, "\n")
	r.mu.Unlock()
	if !strings.Contains(sum, "wanda/XRootD") || !strings.Contains(sum, "readv wanda") {
		t.Errorf("summary lacks the ratio table:\n%s", sum)
	}
}

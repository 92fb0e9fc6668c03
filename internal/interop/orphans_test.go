package interop

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sweepConfig writes a server configuration exporting dir at /scratch,
// logging JSON, sweeping every second without age threshold.
func sweepConfig(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "server.yaml")
	cfg := fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  exports:
    - prefix: /scratch
      path: %q
  orphan_sweep:
    interval: 1s
    min_age: 0s
log:
  format: json
  level: debug
`, dir)
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// slowPut is a PUT whose body the test feeds.
type slowPut struct {
	w    *io.PipeWriter
	done chan error // the status, as an error unless 201/204
}

func startSlowPut(t *testing.T, url string, size int64) *slowPut {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPut, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	p := &slowPut{w: pw, done: make(chan error, 1)}
	go func() {
		resp, err := httpClient.Do(req)
		if err != nil {
			p.done <- err
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusNoContent {
			err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		p.done <- err
	}()
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	return p
}

// A server killed with SIGKILL in the middle of a PUT, a parallel upload
// and a root:// update leaves their temp files; the restarted server
// removes them at start and counts them; a live upload's temp file lives
// through the sweeps that run every second while it trickles in.
func TestOrphansRemovedAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	cfg := sweepConfig(t, dir)
	old := randomBytes(64<<10, 7)
	if err := os.WriteFile(filepath.Join(dir, "old.bin"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	a := startChild(t, "server", "--config", cfg)

	// A PUT of 4 MiB that stops after 1 MiB.
	put := startSlowPut(t, a.URL+"/scratch/put.bin", 4<<20)
	if _, err := put.w.Write(randomBytes(1<<20, 1)); err != nil {
		t.Fatal(err)
	}
	// One part of a parallel upload of 4 MiB.
	req, _ := http.NewRequest(http.MethodPut, a.URL+"/scratch/parts.bin", bytes.NewReader(randomBytes(1<<20, 2)))
	req.Header.Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", 1<<20-1, 4<<20))
	req.Header.Set("Wanda-Upload-Id", "orphan-test-000000001")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("part: status %d, want 202", resp.StatusCode)
	}
	want := 2
	if update := startPyUpdate(t, rootURL(a.URL)+"/scratch/old.bin"); update != nil {
		defer update.Process.Kill()
		want++
	}
	waitFor(t, 20*time.Second, fmt.Sprintf("%d temp files, one of 1 MiB or more", want), func() bool {
		temps := tempFiles(t, dir)
		big := 0
		for _, size := range temps {
			if size >= 1<<20 {
				big++
			}
		}
		return len(temps) == want && big >= 2
	})

	a.Kill(t)
	orphans := tempFiles(t, dir)
	if len(orphans) != want {
		t.Fatalf("after SIGKILL: temp files %v, want %d", orphans, want)
	}
	var orphanBytes int64
	for _, size := range orphans {
		orphanBytes += size
	}

	b := startChild(t, "server", "--config", cfg)
	waitFor(t, 30*time.Second, "the orphans to be swept", func() bool { return len(tempFiles(t, dir)) == 0 })
	if n := metricSum(t, b.URL, "wanda_orphan_temps_removed_total", `export="/scratch"`, `kind="upload"`); n != float64(want) {
		t.Errorf("wanda_orphan_temps_removed_total = %v, want %d", n, want)
	}
	if n := metricSum(t, b.URL, "wanda_orphan_temp_bytes_removed_total", `export="/scratch"`); n != float64(orphanBytes) {
		t.Errorf("wanda_orphan_temp_bytes_removed_total = %v, want %d", n, orphanBytes)
	}
	sameBytes(t, "old.bin after the killed update", readFile(t, filepath.Join(dir, "old.bin")), old)
	for _, name := range []string{"put.bin", "parts.bin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want nothing stored", name, err)
		}
	}

	// A live upload on the restarted server, across sweeps.
	body := randomBytes(3<<20, 3)
	live := startSlowPut(t, b.URL+"/scratch/live.bin", int64(len(body)))
	if _, err := live.w.Write(body[:1<<20]); err != nil {
		t.Fatal(err)
	}
	var temp string
	waitFor(t, 20*time.Second, "the live upload's temp file", func() bool {
		for p := range tempFiles(t, dir) {
			temp = p
		}
		return temp != ""
	})
	sweeps := metricSum(t, b.URL, "wanda_orphan_sweeps_total")
	for i, chunk := range [][]byte{body[1<<20 : 2<<20], body[2<<20:]} {
		waitFor(t, 20*time.Second, "two more sweeps", func() bool {
			return metricSum(t, b.URL, "wanda_orphan_sweeps_total") >= sweeps+2
		})
		sweeps = metricSum(t, b.URL, "wanda_orphan_sweeps_total")
		if n := metricSum(t, b.URL, "wanda_upload_temps_live", `export="/scratch"`); n != 1 {
			t.Errorf("wanda_upload_temps_live = %v during the upload, want 1", n)
		}
		if _, err := os.Stat(temp); err != nil {
			t.Fatalf("the live upload's temp file after sweeps (%d): %v", i, err)
		}
		if _, err := live.w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	live.w.Close()
	if err := <-live.done; err != nil {
		t.Fatalf("the live upload: %v", err)
	}
	sameBytes(t, "live.bin", readFile(t, filepath.Join(dir, "live.bin")), body)
	if n := metricSum(t, b.URL, "wanda_orphan_temps_removed_total"); n != float64(want) {
		t.Errorf("wanda_orphan_temps_removed_total = %v after the live upload, want still %d", n, want)
	}
}

// startPyUpdate opens url for update with the XRootD Python bindings,
// writes 3 bytes at 0 and keeps the file open until killed; nil (after
// missing) when the bindings are not installed.
func startPyUpdate(t *testing.T, url string) *exec.Cmd {
	t.Helper()
	if r := runFor(t, time.Minute, "", "python3", "-c", "import XRootD"); r.Err != nil {
		missing(t, "python3 cannot import XRootD (apt install python3-xrootd): the update copy is not tested")
		return nil
	}
	script := `
import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1], OpenFlags.UPDATE)
assert st.ok, st
st, _ = f.write(b"NEW", 0)
assert st.ok, st
print("ready", flush=True)
sys.stdin.read()
`
	cmd := exec.Command("python3", "-c", script, url)
	cmd.Env = cleanEnv()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("python update: %q, %v\n%s", line, err, stderr.String())
	}
	return cmd
}

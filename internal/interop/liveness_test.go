package interop

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// curlL fetches u with `curl -L` (a client that follows the redirect and
// retries nothing) and returns the final status and the URL that served.
func curlL(t *testing.T, u string) (code, served string, err error) {
	t.Helper()
	cmd := exec.Command("curl", "-sS", "-L", "--noproxy", "*", "--max-time", "10", "-o", os.DevNull,
		"-w", "%{http_code} %{url_effective}", u)
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	code, served, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
	return code, served, err
}

// members asks the redirector for its members: URL -> instance.
func members(t *testing.T, rd string) map[string]string {
	t.Helper()
	resp, err := httpClient.Get(rd + "/api/v1/members")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ms []struct {
		URL      string `json:"url"`
		Instance string `json:"instance"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.URL] = m.Instance
	}
	return out
}

// Liveness faster than heartbeats: two servers hold a file, one is killed
// (SIGKILL: no goodbye) and restarted while a client fetches the file
// through the redirector with plain `curl -L` over and over. With the
// heartbeat alone (5 s, miss limit 3) about half of the requests in the
// 15 s after the kill were sent to the dead server and failed; with the
// members' persistent connections none fails.
//
// The kill falls between two requests of the client: a request already
// sent to the server when it dies fails whatever the redirector does
// (only the client's retry can save it); what is measured is where the
// redirector sends the requests after the death.
func TestKilledReplicaNoFailedCurl(t *testing.T) {
	requireTool(t, "curl")
	rd := startChild(t, "redirector", "--listen", "127.0.0.1:0", "--log-format", "json")
	data := []byte(strings.Repeat("replica ", 512))
	dirA, dirB := t.TempDir(), t.TempDir()
	for _, d := range []string{dirA, dirB} {
		if err := os.WriteFile(filepath.Join(d, "f.bin"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := startChild(t, "server", "--listen", "127.0.0.1:0", "--log-format", "json", "--export-ro", "/store="+dirA, "--join", rd.URL)
	b := startChild(t, "server", "--listen", "127.0.0.1:0", "--log-format", "json", "--export-ro", "/store="+dirB, "--join", rd.URL)
	waitFor(t, 20*time.Second, "both servers joined", func() bool {
		ms := members(t, rd.URL)
		return ms[a.URL] != "" && ms[b.URL] != ""
	})
	firstA := members(t, rd.URL)[a.URL]

	type outcome struct{ code, served, err string }
	pause, paused, resume := make(chan struct{}), make(chan struct{}), make(chan struct{})
	stop := make(chan struct{})
	results := make(chan outcome, 100000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-pause:
				paused <- struct{}{}
				<-resume
			default:
			}
			code, served, err := curlL(t, rd.URL+"/store/f.bin")
			o := outcome{code: code, served: served}
			if err != nil {
				o.err = err.Error()
			}
			results <- o
		}
	}()
	count := func(d time.Duration) {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // the client runs meanwhile
		}
	}
	count(time.Second)

	// kill -9 between two requests, then 3 s of requests (the old miss
	// limit's worth would be 15 s: 3 s already sent half to the dead one).
	pause <- struct{}{}
	<-paused
	a.Kill(t)
	killed := time.Now()
	resume <- struct{}{}
	waitFor(t, 5*time.Second, "the killed server dropped", func() bool { return members(t, rd.URL)[a.URL] == "" })
	dropped := time.Since(killed)
	count(3 * time.Second)

	// Restarted on the same address while the client goes on.
	a2 := startChild(t, "server", "--listen", a.Addr, "--log-format", "json", "--export-ro", "/store="+dirA, "--join", rd.URL)
	waitFor(t, 20*time.Second, "the restarted server joined", func() bool {
		inst := members(t, rd.URL)[a2.URL]
		return inst != "" && inst != firstA
	})
	count(2 * time.Second)
	close(stop)
	<-done
	close(results)

	var n, failed, toB int
	for o := range results {
		n++
		switch {
		case o.err != "" || o.code != "200":
			failed++
			t.Errorf("curl -L failed: code %q, served by %q: %s", o.code, o.served, o.err)
		case strings.HasPrefix(o.served, b.URL):
			toB++
		}
	}
	t.Logf("%d requests, %d failed, %d served by the survivor; killed server dropped %v after SIGKILL", n, failed, toB, dropped)
	if n < 20 {
		t.Errorf("only %d requests ran", n)
	}
	if dropped > time.Second {
		t.Errorf("the killed server was dropped %v after SIGKILL, want within a second", dropped)
	}
	if resp, err := httpClient.Get(a2.URL + "/store/f.bin"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the restarted server does not serve: %v", err)
	} else {
		resp.Body.Close()
	}
}

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The transfer CLI's contract: submit prints the job id alone on its last
// line; status --json prints the job with a top-level state; the job
// moves the files between two servers.
func TestTransferCLI(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(srcDir, "a.txt"), []byte("first file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcDir, "b.txt"), []byte("second file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := serve(t, "--export", "/store="+srcDir)
	dst := serve(t, "--export", "/store="+dstDir, "--tpc-allow", "127.0.0.0/8")
	svc := runUntil(t, []string{"transfer", "serve", "--listen", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(t.TempDir(), "t.db"), "--allow", "127.0.0.0/8"},
		`url=(http://127\.0\.0\.1:\d+)`)

	code, out := run(t, "transfer", "submit", "--server", svc, "--id", "cli-job",
		src+"/store/a.txt", dst+"/store/a.txt", src+"/store/b.txt", dst+"/store/b.txt")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || lines[len(lines)-1] != "cli-job" {
		t.Fatalf("submit: exit %d, output %q", code, out)
	}
	code, out = run(t, "transfer", "status", "--server", svc, "--watch", "--interval", "50ms", "--json", "cli-job")
	var j struct {
		State string         `json:"state"`
		Files map[string]int `json:"files"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.State != "FINISHED" || j.Files["FINISHED"] != 2 {
		t.Fatalf("status --json: exit %d, %q", code, out)
	}
	for _, n := range []string{"a.txt", "b.txt"} {
		want, _ := os.ReadFile(filepath.Join(srcDir, n))
		got, err := os.ReadFile(filepath.Join(dstDir, n))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s at the destination: %q (%v)", n, got, err)
		}
	}
	if code, out = run(t, "transfer", "status", "--server", svc, "cli-job"); code != 0 || !strings.Contains(out, "cli-job FINISHED: 2 finished") {
		t.Errorf("status: exit %d, %q", code, out)
	}
	if code, out = run(t, "transfer", "list", "--server", svc, "--state", "FINISHED"); code != 0 || !strings.Contains(out, "cli-job FINISHED") {
		t.Errorf("list: exit %d, %q", code, out)
	}
	if code, out = run(t, "transfer", "links", "--server", svc); code != 0 || !strings.Contains(out, "->") {
		t.Errorf("links: exit %d, %q", code, out)
	}
	if code, out = run(t, "transfer", "cancel", "--server", svc, "cli-job"); code != 1 || !strings.Contains(out, "ended already") {
		t.Errorf("cancel of a finished job: exit %d, %q", code, out)
	}
	if code, out = run(t, "transfer", "submit", "--server", svc, src+"/store/a.txt"); code != 2 {
		t.Errorf("submit with an odd argument count: exit %d, %q", code, out)
	}
	if code, out = run(t, "transfer", "status", "--server", svc, "no-such-job"); code != 1 || !strings.Contains(out, "no such job") {
		t.Errorf("status of a missing job: exit %d, %q", code, out)
	}

	// A service without --allow reaches no loopback storage: the file
	// fails as a permission problem, not retried.
	closed := runUntil(t, []string{"transfer", "serve", "--listen", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(t.TempDir(), "c.db")},
		`url=(http://127\.0\.0\.1:\d+)`)
	if code, out = run(t, "transfer", "submit", "--server", closed, "--id", "closed", "--retry", "3", src+"/store/a.txt", dst+"/store/c.txt"); code != 0 {
		t.Fatalf("submit: exit %d %q", code, out)
	}
	code, out = run(t, "transfer", "status", "--server", closed, "--watch", "--interval", "50ms", "closed")
	if code != 0 || !strings.Contains(out, "closed FAILED") || !strings.Contains(out, "permission") || !strings.Contains(out, "not allowed") {
		t.Errorf("a job to loopback without --allow: exit %d, %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(dstDir, "c.txt")); err == nil {
		t.Errorf("the closed service copied the file")
	}
}

package interop

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/storage/posix"
	"github.com/wanda-fed/wanda/internal/testproc"
)

// startChild runs `wanda ARGS...` as a child process (the test binary,
// testproc.RunIfChild in TestMain; ARGS must ask for JSON logs) and
// waits until it serves; the test's end stops it.
func startChild(t *testing.T, args ...string) *testproc.Process {
	t.Helper()
	return testproc.StartProcess(t, cleanEnv(), args...)
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(wait)
	}
}

// tempFiles lists the upload temp files below dir (path -> size).
func tempFiles(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), posix.TempPrefix) {
			if fi, err := d.Info(); err == nil {
				out[p] = fi.Size()
			}
		}
		return nil
	})
	return out
}

package posix

import (
	"os"
	"path/filepath"
	"testing"
)

// An upload starts writing back every writebackEvery bytes, one
// writeback at a time, and waits for the last before its file is synced.
func TestWriteback(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &writeback{f: f}
	buf := make([]byte, 1<<20)
	started := 0
	for range 3 * writebackEvery / len(buf) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
		before := w.pending.Load()
		w.wrote(len(buf))
		if w.pending.Load() == 0 && before+int64(len(buf)) >= writebackEvery {
			started++
			w.wait() // the next one may start
		}
	}
	w.wait()
	if started != 3 || w.running.Load() {
		t.Errorf("%d writebacks started for %d bytes (want 3), running %v", started, 3*writebackEvery, w.running.Load())
	}
	var nilWB *writeback
	nilWB.wrote(writebackEvery) // uploads without one: no-op
	nilWB.wait()
}

package mount

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/storage/storagetest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// A file the block cache holds whole is opened in passthrough: its reads
// do not reach the daemon and give the file's bytes. Opens never mix the
// kernel's modes on one inode (which would fail with EIO): a reader
// opened while a reader through the daemon is open goes through the
// daemon too, a writer is refused (ETXTBSY) while readers are in
// passthrough and works once they are closed.
func TestPassthrough(t *testing.T) {
	s, data, _ := startServer(t)
	want := storagetest.RandBytes(7, 5<<20+123)
	if err := os.WriteFile(filepath.Join(data, "pt"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	m, mnt := mountT(t, s.URL+"/data", nil)
	if !m.Passthrough() {
		t.Skip("no FUSE passthrough here (kernel < 6.9 or not root)")
	}
	p := filepath.Join(mnt, "pt")
	readAll := func(f *os.File) {
		t.Helper()
		b, err := io.ReadAll(io.NewSectionReader(f, 0, int64(len(want))+10))
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("read %s: %v: %s", f.Name(), err, testserver.DiffBytes(b, want))
		}
	}
	// Not cached yet: through the daemon; read whole, it becomes complete.
	a, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	readAll(a)
	if m.fsys.passOpens.Load() != 0 {
		t.Fatal("a file not cached was opened in passthrough")
	}
	// Complete now, but a file of the inode is open through the daemon.
	b, err := os.Open(p)
	if err != nil {
		t.Fatalf("second open while the first is open: %v", err)
	}
	readAll(b)
	if m.fsys.passOpens.Load() != 0 {
		t.Fatal("passthrough opened beside a file open through the daemon")
	}
	a.Close()
	b.Close()
	// Alone and complete: passthrough, and no read reaches the daemon
	// (the release of a and b may reach the daemon after the next open:
	// poll for it).
	var c *os.File
	waitFor(t, 10*time.Second, "an open in passthrough", func() bool {
		c, err = os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if m.fsys.passOpens.Load() > 0 {
			return true
		}
		c.Close()
		return false
	})
	reads := m.fsys.reads.Load()
	readAll(c)
	d, err := os.Open(p)
	if err != nil {
		t.Fatalf("second open in passthrough: %v", err)
	}
	readAll(d)
	if got := m.fsys.reads.Load(); got != reads {
		t.Errorf("%d reads reached the daemon in passthrough", got-reads)
	}
	if _, err := os.OpenFile(p, os.O_WRONLY, 0); !errors.Is(err, syscall.ETXTBSY) {
		t.Errorf("open for writing while read in passthrough: %v, want ETXTBSY", err)
	}
	c.Close()
	d.Close()
	waitFor(t, 10*time.Second, "a writer after the passthrough readers closed", func() bool {
		w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if errors.Is(err, syscall.ETXTBSY) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("tail")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return true
	})
	want = append(want, "tail"...)
	got, err := os.ReadFile(filepath.Join(data, "pt"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("server's file after the append: %v: %s", err, testserver.DiffBytes(got, want))
	}
	// The new version is read whole, through the daemon then passthrough.
	for range 2 {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		readAll(f)
		f.Close()
	}
}

package client_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// TestCopyToDevNull: a copy to /dev/null (a throughput test's sink)
// writes into the device: the node stays a character device and no part
// file or record is left beside it, with one and with several streams. A
// pipe is refused with a pointer to wanda cat; an md5 check over several
// streams (which would read the bytes back) is refused before any byte.
func TestCopyToDevNull(t *testing.T) {
	data := bytes.Repeat([]byte("wanda /dev/null "), 1<<16) // 1 MiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	devNull := func() {
		t.Helper()
		fi, err := os.Stat("/dev/null")
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("/dev/null is no longer a character device: %v %v", fi.Mode(), err)
		}
		if left, _ := filepath.Glob("/dev/.null.wanda-part*"); len(left) > 0 {
			t.Fatalf("left in /dev: %v", left)
		}
	}
	devNull()
	c := client.New()
	for _, streams := range []int{1, 4, 0} {
		res, err := c.Copy(t.Context(), []string{srv.URL + "/f"}, "/dev/null", client.CopyOptions{Streams: streams, ChunkMin: 64 << 10, ChunkMax: 128 << 10})
		if err != nil || res[0].Error != "" || res[0].Bytes != int64(len(data)) {
			t.Fatalf("--streams %d: %v %+v", streams, err, res)
		}
		devNull()
	}
	_, err := c.Copy(t.Context(), []string{srv.URL + "/f"}, "/dev/null", client.CopyOptions{Streams: 4, Checksum: "md5"})
	if err == nil || !strings.Contains(err.Error(), "read the bytes back") {
		t.Errorf("md5 over 4 streams into /dev/null: %v", err)
	}
	devNull()

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.Copy(t.Context(), []string{srv.URL + "/f"}, fifo, client.CopyOptions{})
	if err == nil || !strings.Contains(err.Error(), "wanda cat") {
		t.Errorf("copy into a pipe: %v", err)
	}
}

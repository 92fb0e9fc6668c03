package app_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// One port, both protocols: the same file over HTTP and root://, and an
// upload over root:// read back over HTTP (HTTPS works the same way: the
// TLS handshake's first byte is not XRootD's).
func TestServerSpeaksRootAndHTTPOnOnePort(t *testing.T) {
	cfg, dir := newConfig(t)
	want := bytes.Repeat([]byte("wanda root:// and http:// "), 40000)
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, cancel, wait := start(t, cfg)
	defer func() { cancel(); _ = wait() }()
	addr = strings.TrimPrefix(addr, "http://")
	base, root := "http://"+addr, "root://"+addr+"/"

	resp, err := http.Get(base + "/data/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, want) {
		t.Fatalf("HTTP read %d bytes, want the file's %d", len(got), len(want))
	}

	c := client.New()
	xrdclient.Register(c)
	dst := filepath.Join(t.TempDir(), "f.bin")
	res, err := c.Copy(t.Context(), []string{root + "/data/f.bin"}, dst, client.CopyOptions{Streams: 4, Checksum: "adler32"})
	if err != nil || res[0].Error != "" || !res[0].Verified {
		t.Fatalf("root:// copy: %v %+v", err, res)
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, want) {
		t.Fatal("root:// copy differs")
	}
	if _, err := c.Copy(t.Context(), []string{dst}, root+"/data/up/g.bin", client.CopyOptions{Checksum: "adler32"}); err != nil {
		t.Fatalf("root:// upload: %v", err)
	}
	resp, err = http.Get(base + "/data/up/g.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, want) {
		t.Fatalf("the root:// upload read over HTTP: %d bytes, want %d", len(got), len(want))
	}

	// /metrics counts the root:// side too.
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{
		`wanda_xrootd_requests_total{request="kXR_open",result="ok",role="server"}`,
		`wanda_xrootd_requests_total{request="kXR_read",result="ok",role="server"}`,
		`wanda_xrootd_requests_total{request="kXR_write",result="ok",role="server"}`,
		`wanda_xrootd_request_duration_seconds_count{request="kXR_read",role="server"}`,
		`wanda_xrootd_open_connections{role="server"}`,
		`wanda_xrootd_sent_bytes_total{role="server"}`,
	} {
		if !bytes.Contains(got, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	var sent float64
	for _, line := range strings.Split(string(got), "\n") {
		if v, ok := strings.CutPrefix(line, `wanda_xrootd_sent_bytes_total{role="server"} `); ok {
			sent, _ = strconv.ParseFloat(v, 64)
		}
	}
	if sent < float64(len(want)) {
		t.Errorf("wanda_xrootd_sent_bytes_total is %v after a copy of %d bytes", sent, len(want))
	}
}

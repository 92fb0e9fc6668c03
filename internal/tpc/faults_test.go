package tpc_test

import (
	"context"
	"fmt"
	"hash/adler32"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/config"
)

// faultSource is a real HTTP server on loopback that serves one file
// with ranges and Digest, and misbehaves as asked: the faults a
// third-party copy meets that no well-behaved server shows on demand.
type faultSource struct {
	data     []byte
	stall    bool // send half of each answer's body, then nothing
	lie      bool // a wrong adler32 in Digest
	changing bool // a new ETag on every answer
	trickle  bool // 16 KiB every 10 ms
	short    bool // adler32 without its leading zeros ("620062")
	answers  atomic.Int64
	url      string
}

func startFaultSource(t *testing.T, f *faultSource) *faultSource {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
	})
	f.url = "http://" + ln.Addr().String() + "/f.bin"
	return f
}

func (f *faultSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.answers.Add(1)
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	etag := `"v1"`
	if f.changing {
		etag = fmt.Sprintf(`"v%d"`, n)
	}
	h.Set("ETag", etag)
	h.Set("Last-Modified", time.Unix(1700000000, 0).UTC().Format(http.TimeFormat))
	if strings.Contains(strings.ToLower(r.Header.Get("Want-Digest")), "adler32") {
		sum := adler32.Checksum(f.data)
		if f.lie {
			sum++
		}
		v := fmt.Sprintf("%08x", sum) // hex, as XRootD and wanda send it
		if f.short {
			v = fmt.Sprintf("%x", sum)
		}
		h.Set("Digest", "adler32="+v)
	}
	lo, hi := int64(0), int64(len(f.data))-1
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		a, b, _ := strings.Cut(strings.TrimPrefix(rg, "bytes="), "-")
		lo, _ = strconv.ParseInt(a, 10, 64)
		if b != "" {
			hi, _ = strconv.ParseInt(b, 10, 64)
		}
		hi = min(hi, int64(len(f.data))-1)
		if lo > hi {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", len(f.data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", lo, hi, len(f.data)))
		status = http.StatusPartialContent
	}
	h.Set("Content-Length", strconv.FormatInt(hi-lo+1, 10))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	body := f.data[lo : hi+1]
	switch {
	case f.stall:
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case f.trickle:
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for len(body) > 0 {
			k := min(16<<10, len(body))
			if _, err := w.Write(body[:k]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			body = body[k:]
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
	default:
		w.Write(body)
	}
}

func quick(c *config.Config) {
	c.Server.TPC.StallTimeout = 300 * time.Millisecond
	c.Server.TPC.FirstByteTimeout = 300 * time.Millisecond
	c.Server.TPC.Attempts = 3
}

// Every fault ends with one failure line that names the cause, and
// nothing at the destination.
func TestFaults(t *testing.T) {
	data := randomBytes(6<<20, 3)
	dst, dstDir := site(t, both(loopbackTPC, quick))
	for _, tc := range []struct {
		name  string
		src   *faultSource
		final string
		hdr   []string
	}{
		{"source stalls", &faultSource{data: data, stall: true}, "failure: timeout", nil},
		{"checksum mismatch", &faultSource{data: data, lie: true}, "failure: checksum mismatch", []string{"X-Number-Of-Streams", "4"}},
		{"checksum mismatch, one stream", &faultSource{data: data, lie: true}, "failure: checksum mismatch", []string{"X-Number-Of-Streams", "1", "RequireChecksumVerification", "true"}},
		{"adler32 with leading zeros, written without", &faultSource{data: []byte("a"), short: true}, "success: Created", []string{"RequireChecksumVerification", "true"}},
		// Larger than a pull's first chunks (16 MiB): several answers.
		{"source changes mid-copy", &faultSource{data: randomBytes(48<<20, 8), changing: true}, "failure: source changed", []string{"X-Number-Of-Streams", "4"}},
	} {
		src := startFaultSource(t, tc.src)
		start := time.Now()
		a := copyReq(t, dst.URL+"/store/x.bin", append([]string{"Source", src.url}, tc.hdr...)...)
		t.Logf("%s: %s in %v", tc.name, a.final, time.Since(start).Round(time.Millisecond))
		if a.status != http.StatusAccepted || !strings.HasPrefix(a.final, tc.final) {
			t.Errorf("%s: %d, final line %q, want %q\n%s", tc.name, a.status, a.final, tc.final, a.body)
		}
		if strings.HasPrefix(tc.final, "success") {
			sameFile(t, filepath.Join(dstDir, "x.bin"), tc.src.data)
			os.Remove(filepath.Join(dstDir, "x.bin"))
		}
		onlyFiles(t, dstDir)
	}
	// A source missing.
	src, _ := site(t, loopbackTPC)
	wantFinal(t, copyReq(t, dst.URL+"/store/x.bin", "Source", src.URL+"/store/missing"), "failure: remote 404")
	// A remote that is not there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String() + "/f"
	ln.Close()
	wantFinal(t, copyReq(t, dst.URL+"/store/x.bin", "Source", gone), "failure: network error")
	onlyFiles(t, dstDir)
}

// A client that stops reading the marker stream ends the copy, as with
// XrdHttpTPC: the destination is left as it was.
func TestClientGoesAway(t *testing.T) {
	src := startFaultSource(t, &faultSource{data: randomBytes(8<<20, 4), trickle: true})
	dst, dstDir := site(t, both(loopbackTPC, func(c *config.Config) { c.Server.TPC.MarkerInterval = 10 * time.Millisecond }))
	req, err := http.NewRequest("COPY", dst.URL+"/store/x.bin", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Source", src.url)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	if _, err := io.ReadAtLeast(resp.Body, buf, 64); err != nil {
		t.Fatal(err)
	}
	before := src.answers.Load()
	resp.Body.Close() // the connection goes with it (unread body)
	waitFor(t, 10*time.Second, "the copy to end after its client went away", func() bool {
		return strings.Contains(dst.Log(), "third-party copy failed")
	})
	onlyFiles(t, dstDir)
	if !strings.Contains(dst.Log(), "reason=canceled") {
		t.Errorf("the copy did not end as canceled:\n%s", dst.Log())
	}
	if src.answers.Load()-before > 8 {
		t.Errorf("the source kept being read after the client left")
	}
}

// A destination disk that fills: "failure: no space", no temp file.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounting a small tmpfs needs root (the CI runs as root)")
	}
	disk := t.TempDir()
	if err := unix.Mount("tmpfs", disk, "tmpfs", 0, "size=2m,mode=0755"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(disk, 0); err != nil {
			t.Errorf("umount: %v", err)
		}
	})
	src, srcDir := site(t, loopbackTPC)
	if err := os.WriteFile(filepath.Join(srcDir, "big.bin"), randomBytes(5<<20, 5), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcDir, "small.bin"), randomBytes(100<<10, 6), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := siteAt(t, loopbackTPC, disk)
	for _, streams := range []string{"1", "4"} {
		wantFinal(t, copyReq(t, dst.URL+"/store/big.bin", "Source", src.URL+"/store/big.bin", "X-Number-Of-Streams", streams), "failure: no space")
		onlyFiles(t, disk)
	}
	wantFinal(t, copyReq(t, dst.URL+"/store/small.bin", "Source", src.URL+"/store/small.bin"), "success: Created")
	onlyFiles(t, disk, "small.bin")
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling
	}
}

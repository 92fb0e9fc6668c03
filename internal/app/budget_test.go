package app_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// TestBufferBudgetManyReaders: a `wanda server` process with the smallest
// buffer budget, 150 slow readers holding its buffers (8 MiB multi-range
// answers they read only at the end) and 1000 concurrent readers of
// vector reads over HTTP (multi-range) and root:// (kXR_readv): all get
// the right bytes; requests waited for the budget and its allocations
// never exceeded it; the server's RSS grew by no more than the budget and
// the connections' share.
func TestBufferBudgetManyReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("1000 readers")
	}
	dir := t.TempDir()
	want := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	const budget = config.MinBufferMemory
	srv := testproc.StartProcess(t, nil, "server", "--export", "/data="+dir, "--listen", "127.0.0.1:0", "--log-format", "json", "--buffer-memory", "24MiB")
	idle := srv.RSS()
	peak := idle
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, srv.RSS())
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	// First, slow readers: multi-range answers of 8 MiB that they do not
	// read yet, so that the server's buffers stay taken (each holds one
	// while its socket is full) until more of them wait than the budget
	// serves.
	const slowN, slowRanges, slowLen = 150, 128, 60 << 10
	slow := make([]net.Conn, slowN)
	slowWant := make([][]client.Range, slowN)
	for i := range slow {
		r := rand.New(rand.NewPCG(uint64(i), 9))
		var hdr strings.Builder
		for k := range slowRanges {
			off := int64(k)*(int64(len(want))/slowRanges) + r.Int64N(int64(len(want))/slowRanges-slowLen)
			slowWant[i] = append(slowWant[i], client.Range{Off: off, Len: slowLen})
			if k > 0 {
				hdr.WriteByte(',')
			}
			fmt.Fprintf(&hdr, "%d-%d", off, off+slowLen-1)
		}
		conn, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "GET /data/f.bin HTTP/1.1\r\nHost: %s\r\nRange: bytes=%s\r\n\r\n", srv.Addr, hdr.String()); err != nil {
			t.Fatal(err)
		}
		slow[i] = conn
	}
	deadline := time.Now().Add(time.Minute)
	for metricValue(t, srv.URL, `wanda_buffer_waiting{role="server"}`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no request ever waited for the budget")
		}
		time.Sleep(10 * time.Millisecond)
	}

	c := client.New()
	xrdclient.Register(c)
	urls := []string{srv.URL + "/data/f.bin", "root://" + srv.Addr + "//data/f.bin"}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const readers, segs, segLen = 1000, 16, 16 << 10
	var wg sync.WaitGroup
	errs := make(chan error, readers+slowN)
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			f, err := c.Open(ctx, urls[i%2])
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			ranges := make([]client.Range, segs)
			dst := make([][]byte, segs)
			for k := range ranges {
				ranges[k] = client.Range{Off: int64(k)*(int64(len(want))/segs) + r.Int64N(int64(len(want))/segs-segLen), Len: segLen}
				dst[k] = make([]byte, segLen)
			}
			if err := f.ReadV(ctx, ranges, dst); err != nil {
				errs <- fmt.Errorf("%s: %w", urls[i%2], err)
				return
			}
			for k, rg := range ranges {
				if !bytes.Equal(dst[k], want[rg.Off:rg.End()]) {
					errs <- fmt.Errorf("%s: reader %d: range %d at %d differs", urls[i%2], i, k, rg.Off)
					return
				}
			}
		}()
	}
	// The slow readers read their answers now: every part must be right.
	for i, conn := range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkMultipart(conn, want, slowWant[i]); err != nil {
				errs <- fmt.Errorf("slow reader %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d readers failed", n, readers)
	}
	high, waits := metricValue(t, srv.URL, `wanda_buffer_bytes{role="server",state="high"}`), metricValue(t, srv.URL, `wanda_buffer_waits_total{role="server"}`)
	t.Logf("budget %d MiB: high %.1f MiB, %v waits; server RSS %d KiB idle, %d KiB at the peak", budget>>20, high/(1<<20), waits, idle, peak)
	if high > budget || high == 0 {
		t.Errorf("the buffers allocated peaked at %v bytes, budget %d", high, budget)
	}
	if waits == 0 {
		t.Errorf("no request waited: the load did not reach the budget of %d bytes", budget)
	}
	// The bound: the budget, 64 KiB per connection (1000 at most), and 16
	// MiB for the runtime's and the collector's slack.
	if bound := int64(budget>>10) + readers*64 + 16<<10; peak-idle > bound && !raceEnabled {
		t.Errorf("the server's RSS grew by %d KiB under the load, bound %d KiB", peak-idle, bound)
	}
}

// checkMultipart reads a multipart/byteranges answer from conn and
// compares each part with want.
func checkMultipart(conn net.Conn, want []byte, ranges []client.Range) error {
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("status %s", resp.Status)
	}
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	for k, rg := range ranges {
		part, err := mr.NextPart()
		if err != nil {
			return fmt.Errorf("part %d: %w", k, err)
		}
		if got, wantCR := part.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-%d/%d", rg.Off, rg.End()-1, len(want)); got != wantCR {
			return fmt.Errorf("part %d: Content-Range %q, want %q", k, got, wantCR)
		}
		b, err := io.ReadAll(part)
		if err != nil || !bytes.Equal(b, want[rg.Off:rg.End()]) {
			return fmt.Errorf("part %d: %d bytes differ (%v)", k, len(b), err)
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		return fmt.Errorf("after the last part: %v", err)
	}
	return nil
}

// metricValue reads one sample (name with its labels, as exposed) from
// /metrics.
func metricValue(t *testing.T, base, sample string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /metrics", sample)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

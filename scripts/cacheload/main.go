// Command cacheload measures a cache's memory under many concurrent cold
// readers (issue 14): it starts an origin and a cache in front of it, has
// N readers GET N distinct files through the cache at once (every byte
// checked against the origin's), and reports the cache process's peak
// RSS (VmHWM, and VmRSS sampled every 10 ms), the wall time and the
// aggregate rate.
//
//	go run ./scripts/cacheload -wanda bin/wanda -n 50 -size 20MB [-ram 256MiB]
//	go run ./scripts/cacheload -xcache -n 50 -size 20MB -ram 1GiB
//
// With -xcache the origin is an XRootD data server and the cache XRootD's
// XCache (internal/xrdpeer, pfc.ram = -ram, 1 MiB blocks, prefetch 8),
// read over its XrdHttp port. XCache refuses a pfc.ram under 1 GiB.
//
// It is a script, not a test: numbers depend on the machine; BENCHMARKS.md
// quotes them with the command.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/wan"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

func main() {
	bin := flag.String("wanda", "bin/wanda", "the wanda binary")
	n := flag.Int("n", 50, "concurrent readers (one file each)")
	sizeS := flag.String("size", "20MB", "file size")
	ram := flag.String("ram", "", "the cache's memory budget (wanda cache --ram; XCache pfc.ram); empty: the default")
	scratch := flag.String("dir", "", "scratch directory (default: a temporary one, removed)")
	xcache := flag.Bool("xcache", false, "measure XRootD's XCache instead of wanda cache")
	extra := flag.String("cache-args", "", "more flags for wanda cache (space separated)")
	flag.Parse()
	size, err := wan.ParseSize(*sizeS)
	if err != nil {
		fail(err)
	}
	dir := *scratch
	if dir == "" {
		if dir, err = os.MkdirTemp("", "cacheload-"); err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
	}
	origin := filepath.Join(dir, "origin")
	sums, err := makeFiles(origin, *n, size)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var base string
	var pid int
	if *xcache {
		stop, b, p, err := startXCache(ctx, dir, origin, *ram)
		if err != nil {
			fail(err)
		}
		defer stop()
		base, pid = b, p
	} else {
		stop, b, p, err := startWanda(ctx, *bin, dir, origin, *ram, *extra)
		if err != nil {
			fail(err)
		}
		defer stop()
		base, pid = b, p
	}
	idle, _ := procStatus(pid, "VmRSS:")
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := procStatus(pid, "VmRSS:"); err == nil && v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *n, DisableCompression: true}}
	var wg sync.WaitGroup
	errs := make([]error, *n)
	start := time.Now()
	for i := range *n {
		wg.Go(func() { errs[i] = read(ctx, hc, base+"/"+name(i), sums[i], size) })
	}
	wg.Wait()
	el := time.Since(start)
	close(done)
	<-sampled
	hwm, _ := procStatus(pid, "VmHWM:")
	if err := errors.Join(errs...); err != nil {
		fail(err)
	}
	what := "wanda cache"
	if *xcache {
		what = "XCache"
	} else {
		defer printRAM(strings.TrimSuffix(base, "/store"))
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("%s: %d readers x %d bytes, ram %q: %.2f s, %.0f MB/s; RSS idle %.0f MiB, peak sampled %.0f MiB, VmHWM %.0f MiB\n",
		what, *n, size, *ram, el.Seconds(), float64(int64(*n)*size)/1e6/el.Seconds(), mib(idle), mib(peak.Load()), mib(hwm))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cacheload:", err)
	os.Exit(1)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func name(i int) string { return fmt.Sprintf("f%04d", i) }

// makeFiles writes n files of distinct pseudo-random bytes, returning
// their CRC-32Cs.
func makeFiles(dir string, n int, size int64) ([]uint32, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sums := make([]uint32, n)
	for i := range n {
		f, err := os.Create(filepath.Join(dir, name(i)))
		if err != nil {
			return nil, err
		}
		h := crc32.New(castagnoli)
		r := rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), 1})
		w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
		_, err = io.CopyN(w, r, size)
		if err == nil {
			err = w.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		sums[i] = h.Sum32()
	}
	return sums, nil
}

func read(ctx context.Context, hc *http.Client, u string, sum uint32, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	h := crc32.New(castagnoli)
	m, err := io.Copy(h, resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if m != size || h.Sum32() != sum {
		return fmt.Errorf("GET %s: %d bytes, not the origin's", u, m)
	}
	return nil
}

// freePort asks the kernel for a free loopback port (the child binds it
// a moment later; a lost race fails the start, which is retried).
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startChild starts bin args with --listen on a free port and waits until
// /healthz answers.
func startChild(ctx context.Context, bin string, args ...string) (*exec.Cmd, string, error) {
	for try := 0; ; try++ {
		addr, err := freePort()
		if err != nil {
			return nil, "", err
		}
		cmd := exec.CommandContext(ctx, bin, append(args, "--listen", addr, "--log-level", "warn")...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, "", err
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		base := "http://" + addr
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get(base + "/healthz")
			if err == nil {
				resp.Body.Close()
				return cmd, base, nil
			}
			select {
			case <-exited:
			case <-time.After(20 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				cmd.Process.Kill()
			}
			break
		}
		if try >= 3 {
			return nil, "", fmt.Errorf("%s %s did not start", bin, args[0])
		}
	}
}

func startWanda(ctx context.Context, bin, dir, origin, ram, extra string) (func(), string, int, error) {
	srv, up, err := startChild(ctx, bin, "server", "--export", "/store="+origin)
	if err != nil {
		return nil, "", 0, err
	}
	args := []string{"cache", "--upstream", up, "--dir", filepath.Join(dir, "cache"), "--max-size", "100GiB"}
	if ram != "" {
		args = append(args, "--ram", ram)
	}
	args = append(args, strings.Fields(extra)...)
	cache, base, err := startChild(ctx, bin, args...)
	if err != nil {
		srv.Process.Kill()
		return nil, "", 0, err
	}
	stop := func() {
		cache.Process.Kill()
		srv.Process.Kill()
	}
	return stop, base + "/store", cache.Process.Pid, nil
}

func startXCache(ctx context.Context, dir, origin, ram string) (func(), string, int, error) {
	if ram == "" {
		ram = "1GiB" // XCache's least
	}
	sz, err := wan.ParseSize(ram)
	if err != nil {
		return nil, "", 0, err
	}
	org, err := xrdpeer.Start(ctx, xrdpeer.Options{Dir: origin, Work: filepath.Join(dir, "xrd-origin"), Checksum: "none"})
	if err != nil {
		return nil, "", 0, err
	}
	work := filepath.Join(dir, "xcache")
	xc, err := xrdpeer.Start(ctx, xrdpeer.Options{
		Dir: filepath.Join(dir, "xcache-data"), Work: work, Writable: true, Checksum: "none", HTTP: true,
		Plugins: []string{"libXrdPss", "libXrdPfc"},
		Extra: []string{
			"ofs.osslib libXrdPss.so",
			"pss.origin " + org.Addr,
			"pss.cachelib libXrdPfc.so",
			"pfc.blocksize 1M",
			"pfc.prefetch 8",
			fmt.Sprintf("pfc.ram %dm", sz>>20),
			"pfc.diskusage 0.90 0.95",
		},
	})
	if err != nil {
		org.Close()
		return nil, "", 0, err
	}
	stop := func() { xc.Close(); org.Close() }
	pid, err := pidOf(filepath.Join(work, "xrootd.cfg"))
	if err != nil {
		stop()
		return nil, "", 0, err
	}
	return stop, xc.HTTP, pid, nil
}

// pidOf finds the process whose command line holds s.
func pidOf(s string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv0, _, _ := bytes.Cut(b, []byte{0})
		if err == nil && bytes.Contains(b, []byte(s)) && filepath.Base(string(argv0)) == "xrootd" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no xrootd process with %s", s)
}

// procStatus reads one kB field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// printRAM shows the memory budget's counters of a wanda cache.
func printRAM(base string) {
	resp, err := http.Get(base + "/api/v1/cache/stats")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var s struct {
		RAM map[string]any `json:"ram"`
	}
	if json.NewDecoder(resp.Body).Decode(&s) == nil && s.RAM != nil {
		fmt.Printf("  budget: %v\n", s.RAM)
	}
}

package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// startClusterCache runs a `wanda cache` process in front of upstream,
// joined to the redirector rd and in its cluster (polled every 100ms).
func startClusterCache(t *testing.T, upstream, rd string) *testproc.Process {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`cache:
  listen: 127.0.0.1:0
  upstream: %s
  dir: %s
  max_size: 64MiB
  cluster: %s
  cluster_refresh: 100ms
  federation:
    join: [%s]
    heartbeat: 200ms
log:
  format: json
  level: info
`, upstream, filepath.Join(dir, "cache"), rd, rd)
	file := filepath.Join(dir, "cache.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return testproc.StartProcess(t, nil, "cache", "--config", file)
}

// clusterOf is the redirector's list of its cache cluster.
func clusterOf(t *testing.T, rd string) fed.Cluster {
	t.Helper()
	resp, err := http.Get(rd + fed.ClusterPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c fed.Cluster
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitClusterSize polls until the redirector and every cache in caches
// see n members.
func waitClusterSize(t *testing.T, rd string, caches []*testproc.Process, n int) *fed.Ring {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := clusterOf(t, rd)
		ok := len(c.Members) == n
		for _, p := range caches {
			ok = ok && metricValue(t, p.URL, "wanda_cache_cluster_members") == float64(n)
		}
		if ok {
			return fed.NewRing(c.Members)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not reach %d members within 10s: the redirector lists %d", n, len(c.Members))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readVia GETs url following redirects and returns the body and the
// host:port that answered; a redirect chain longer than two (a cache and
// then the owner, after a redirector) fails the test.
func readVia(t *testing.T, url string) ([]byte, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > 2 {
			return fmt.Errorf("%d redirects", len(via))
		}
		return nil
	}}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b, resp.Request.URL.Host
}

// upstreamBytes sums what the caches fetched from their upstream.
func upstreamBytes(t *testing.T, caches []*testproc.Process) float64 {
	var sum float64
	for _, p := range caches {
		sum += metricValue(t, p.URL, "wanda_cache_upstream_bytes_total")
	}
	return sum
}

// TestCacheCluster: three `wanda cache` processes joined to a redirector
// with select: hash are one cache. A reader of any file through any of
// them, or through the redirector, ends at the file's owner (one redirect
// at most), over HTTP and root://; every file is fetched from the origin
// once for the whole cluster. SIGKILLed, an owner leaves the ring at once:
// only its files move (≈ 1/3), each to the cache that ranked second for
// it, and the others stay where they are, served from disk.
func TestCacheCluster(t *testing.T) {
	originDir := t.TempDir()
	const nFiles = 60
	files := map[string][]byte{}
	var total int
	rng := rand.New(rand.NewPCG(7, 29))
	for i := range nFiles {
		b := make([]byte, 1000+rng.IntN(40000))
		for k := range b {
			b[k] = byte(rng.Uint32())
		}
		files[fmt.Sprintf("/store/c/f%02d.bin", i)] = b
		total += len(b)
		if err := os.MkdirAll(filepath.Join(originDir, "c"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(originDir, "c", fmt.Sprintf("f%02d.bin", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	origin := testserver.Start(t, config.Export{Prefix: "/store", Path: originDir})
	rd := testserver.StartRedirector(t, func(c *config.Config) {
		c.Redirector.Select = "hash"
		c.Redirector.Heartbeat = 200 * time.Millisecond
	})
	var caches []*testproc.Process
	for range 3 {
		caches = append(caches, startClusterCache(t, origin.URL, rd.URL))
	}
	ring := waitClusterSize(t, rd.URL, caches, 3)
	owner := map[string]string{} // path -> owner's host:port
	for p := range files {
		o, _ := ring.Owner(p)
		owner[p] = fed.HostOf(o.URL)
	}

	// Through every cache and through the redirector: at the owner.
	for p, want := range files {
		for _, c := range caches {
			got, at := readVia(t, c.URL+p)
			if !bytes.Equal(got, want) || at != owner[p] {
				t.Fatalf("%s via %s: %d bytes from %s, want %d from the owner %s", p, c.Addr, len(got), at, len(want), owner[p])
			}
		}
		if got, at := readVia(t, rd.URL+p); !bytes.Equal(got, want) || at != owner[p] {
			t.Fatalf("%s via the redirector: %d bytes from %s, want the owner %s", p, len(got), at, owner[p])
		}
	}
	// Each file was fetched once for the whole cluster.
	if got := upstreamBytes(t, caches); got != float64(total) {
		t.Fatalf("the caches fetched %.0f bytes from the origin, want each file once: %d", got, total)
	}
	redirects := metricValue(t, caches[0].URL, "wanda_cache_cluster_redirects_total")
	if redirects == 0 {
		t.Fatal("cache 0 redirected no reader")
	}

	// root://: a reader of a file another cache owns is sent there.
	var p0 string
	for p := range files {
		if owner[p] != caches[0].Addr {
			p0 = p
			break
		}
	}
	xc := client.New()
	xrdclient.Register(xc)
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := xc.Get(ctx, "root://"+caches[0].Addr+"/"+p0, &buf, ""); err != nil || !bytes.Equal(buf.Bytes(), files[p0]) {
		t.Fatalf("root:// read of %s via %s: %d bytes, %v", p0, caches[0].Addr, buf.Len(), err)
	}
	if got := metricValue(t, caches[0].URL, "wanda_cache_cluster_redirects_total"); got <= redirects {
		t.Fatalf("root:// read of another cache's file: %v redirects before, %v after", redirects, got)
	}
	if got := upstreamBytes(t, caches); got != float64(total) {
		t.Fatalf("the root:// read fetched from the origin: %.0f bytes, want %d", got, total)
	}

	// The owner of the most files dies.
	count := map[string]int{}
	for _, o := range owner {
		count[o]++
	}
	victim := 0
	for i, c := range caches {
		if count[c.Addr] > count[caches[victim].Addr] {
			victim = i
		}
	}
	dead := caches[victim]
	dead.Kill(t)
	alive := append(append([]*testproc.Process{}, caches[:victim]...), caches[victim+1:]...)
	fetchedBefore := upstreamBytes(t, alive)
	after := waitClusterSize(t, rd.URL, alive, 2)
	moved, movedBytes := 0, 0
	for p, want := range files {
		o, _ := after.Owner(p)
		now := fed.HostOf(o.URL)
		if owner[p] == dead.Addr {
			moved++
			movedBytes += len(want)
			if ranked := ring.Owners(p); fed.HostOf(ranked[1].URL) != now {
				t.Fatalf("%s moved to %s, want the second ranked %s", p, now, fed.HostOf(ranked[1].URL))
			}
		} else if now != owner[p] {
			t.Fatalf("%s moved from %s to %s although another cache died", p, owner[p], now)
		}
		for _, c := range alive {
			if got, at := readVia(t, c.URL+p); !bytes.Equal(got, want) || at != now {
				t.Fatalf("after the kill, %s via %s: %d bytes from %s, want the owner %s", p, c.Addr, len(got), at, now)
			}
		}
	}
	frac := float64(moved) / nFiles
	t.Logf("one of 3 caches killed: %d of %d files (%.2f) moved", moved, nFiles, frac)
	if moved != count[dead.Addr] || frac < 0.2 || frac > 0.5 {
		t.Fatalf("%d files moved (the dead cache owned %d), want ≈ 1/3 of %d", moved, count[dead.Addr], nFiles)
	}
	// Only the moved files were fetched again: the others stayed cached.
	if got := upstreamBytes(t, alive) - fetchedBefore; got != float64(movedBytes) {
		t.Fatalf("after the kill the survivors fetched %.0f bytes, want the moved files' %d", got, movedBytes)
	}
}

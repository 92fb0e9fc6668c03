package xrdclient

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/xrootd/server"
)

// countedWanda is a wanda server whose root:// requests are counted.
func countedWanda(t *testing.T) (wandaPeer, *metrics.XRootD) {
	m := metrics.NewXRootD(prometheus.NewRegistry(), "server")
	p := startWandaWith(t, func(o *server.Options) { o.Metrics = m })
	return p, m
}

func requests(m *metrics.XRootD, req string) int {
	return int(testutil.ToFloat64(m.Requests.WithLabelValues(req, "ok")))
}

// waitRequests polls the server's count of req until it reads want (the
// server counts a request after its answer is sent, when the client may
// have gone on already).
func waitRequests(t *testing.T, m *metrics.XRootD, req string, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for requests(m, req) != want {
		if time.Now().After(deadline) {
			t.Errorf("%d %s %s, want %d", requests(m, req), req, what, want)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitOpenFiles polls the server's open-file gauge until it reads want.
func waitOpenFiles(t *testing.T, m *metrics.XRootD, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for int(testutil.ToFloat64(m.OpenFiles)) != want {
		if time.Now().After(deadline) {
			t.Fatalf("server has %v files open, want %d", testutil.ToFloat64(m.OpenFiles), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Successive reads of one file reuse the open handle on the connection:
// one kXR_open for several ReadV and Read calls, then the file is closed
// once HoldOpen passed, by the connection's next user; at most maxHeld
// files stay open on a connection.
func TestHeldFileReused(t *testing.T) {
	p, m := countedWanda(t)
	data := randomBytes(1<<20, 31)
	p.writeFile(t, "/data/h", data)
	p.writeFile(t, "/data/other", data[:1000])
	tr := New(Options{})
	defer tr.CloseIdle()
	u, _ := url.Parse(p.URL("/data/h"))
	ctx := context.Background()

	want := []client.Range{{Off: 10, Len: 100}, {Off: 500000, Len: 4096}}
	for i := 0; i < 3; i++ {
		dst := [][]byte{make([]byte, 100), make([]byte, 4096)}
		if err := tr.ReadV(ctx, u, want, dst); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst[0], data[10:110]) || !bytes.Equal(dst[1], data[500000:504096]) {
			t.Fatalf("ReadV %d: wrong bytes", i)
		}
	}
	rc, _, err := tr.Read(ctx, u, 1000, 2000, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data[1000:3000]) {
		t.Fatalf("Read: %d bytes, %v", len(got), err)
	}
	waitRequests(t, m, "kXR_open", 1, "for 3 ReadV and a Read of one file")
	waitRequests(t, m, "kXR_readv", 3, "for 3 ReadV")
	waitOpenFiles(t, m, 1) // held

	// Past HoldOpen (the held file's last use moved an hour back), the
	// next use of the connection closes it.
	tr.pool.mu.Lock()
	for _, cs := range tr.pool.idle {
		for _, c := range cs {
			for i := range c.held {
				c.held[i].last = c.held[i].last.Add(-time.Hour)
			}
		}
	}
	tr.pool.mu.Unlock()
	uo, _ := url.Parse(p.URL("/data/other"))
	dst := [][]byte{make([]byte, 10)}
	if err := tr.ReadV(ctx, uo, []client.Range{{Off: 0, Len: 10}}, dst); err != nil {
		t.Fatal(err)
	}
	waitOpenFiles(t, m, 1) // /data/h closed, /data/other held in turn
	waitRequests(t, m, "kXR_close", 1, "after the held file's time passed")
}

// A file read and then replaced by the same transport: the held handle
// is let go before the upload (XRootD refuses to open a file for writing
// while it is open for reading), and a read after the upload sees the new
// bytes — from XRootD's server and from wanda's.
func TestHeldFileReplaced(t *testing.T) {
	forPeers(t, func(t *testing.T, p peer) {
		old, fresh := randomBytes(64<<10, 32), randomBytes(64<<10, 33)
		p.writeFile(t, "/data/r", old)
		tr := New(Options{})
		defer tr.CloseIdle()
		c := client.New()
		c.Register("root", tr)
		u, _ := url.Parse(p.URL("/data/r"))
		ctx := context.Background()
		dst := [][]byte{make([]byte, 1000)}
		if err := tr.ReadV(ctx, u, []client.Range{{Off: 0, Len: 1000}}, dst); err != nil {
			t.Fatal(err)
		}
		// The file is held on connection A; connection B, holding another
		// file, is the most recently used: the upload goes on B.
		p.writeFile(t, "/data/r2", old)
		ti, _ := target(u)
		a, err := tr.get(ctx, ti)
		if err != nil {
			t.Fatal(err)
		}
		u2, _ := url.Parse(p.URL("/data/r2"))
		if err := tr.ReadV(ctx, u2, []client.Range{{Off: 0, Len: 1000}}, dst); err != nil {
			t.Fatal(err)
		}
		b, err := tr.get(ctx, ti)
		if err != nil {
			t.Fatal(err)
		}
		tr.put(a)
		tr.put(b)
		// Held past HoldOpen (its last read an hour back): still open on
		// the server until A's next use, and let go all the same before
		// the upload.
		tr.pool.mu.Lock()
		for _, cs := range tr.pool.idle {
			for _, c := range cs {
				for i := range c.held {
					c.held[i].last = c.held[i].last.Add(-time.Hour)
				}
			}
		}
		tr.pool.mu.Unlock()
		src := t.TempDir() + "/fresh"
		if err := os.WriteFile(src, fresh, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Copy(ctx, []string{src}, p.URL("/data/r"), client.CopyOptions{}); err != nil {
			t.Fatalf("replacing a file held open for reading: %v", err)
		}
		if err := tr.ReadV(ctx, u, []client.Range{{Off: 0, Len: 1000}}, dst); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst[0], fresh[:1000]) {
			t.Fatal("read after the upload returned the old bytes")
		}
	})
}

func TestHeldFilesBounded(t *testing.T) {
	p, m := countedWanda(t)
	tr := New(Options{})
	defer tr.CloseIdle()
	ctx := context.Background()
	for i := range maxHeld + 3 {
		name := "/data/f" + string(rune('a'+i))
		p.writeFile(t, name, []byte("some bytes"))
		u, _ := url.Parse(p.URL(name))
		dst := [][]byte{make([]byte, 4)}
		if err := tr.ReadV(ctx, u, []client.Range{{Off: 0, Len: 4}}, dst); err != nil {
			t.Fatal(err)
		}
	}
	waitOpenFiles(t, m, maxHeld)
}

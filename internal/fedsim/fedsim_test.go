package fedsim

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/testserver"
)

var testNS = Namespace{Prefix: "/store/sim", Files: 300, Members: 7, MaxReplicas: 3, Size: 1234}

// Each file is held by 1 to 3 members; FilesOf lists exactly what Holds
// says; digests hold exactly their member's names.
func TestNamespace(t *testing.T) {
	counts := map[int]int{}
	for i := range testNS.Files {
		h := testNS.Holders(i)
		if len(h) < 1 || len(h) > 3 || len(slices.Compact(slices.Sorted(slices.Values(h)))) != len(h) {
			t.Fatalf("file %d: holders %v", i, h)
		}
		counts[len(h)]++
		if testNS.Index(testNS.Name(i)) != i {
			t.Fatalf("index of %s", testNS.Name(i))
		}
	}
	if len(counts) != 3 {
		t.Errorf("replica counts %v: want 1, 2 and 3", counts)
	}
	for m := range testNS.Members {
		files := testNS.FilesOf(m)
		d := testNS.Digest(m)
		for i := range testNS.Files {
			held := testNS.Holds(m, testNS.Name(i))
			if held != slices.Contains(files, i) {
				t.Fatalf("member %d file %d: Holds %v, FilesOf disagrees", m, i, held)
			}
			if held && !d.Has(fed.Fingerprint(testNS.Name(i))) {
				t.Fatalf("member %d: digest misses file %d", m, i)
			}
		}
	}
	for _, bad := range []string{"/store/sim/f12", "/store/sim/f0000300", "/other/f0000001", "/store/sim/g0000001"} {
		if testNS.Index(bad) >= 0 {
			t.Errorf("%s has an index", bad)
		}
	}
}

// A simulated member answers the locate API, HEAD and GET as a real
// `wanda server` with the same files does, answer for answer.
func TestAgainstServer(t *testing.T) {
	const m = 3
	rd := testserver.StartRedirector(t, nil)
	sim, err := Start(Options{NS: testNS, Index: m, Parent: rd.URL, Digest: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	dir := t.TempDir()
	for _, i := range testNS.FilesOf(m) {
		p := filepath.Join(dir, strings.TrimPrefix(testNS.Name(i), testNS.Prefix))
		if err := os.WriteFile(p, make([]byte, testNS.Size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, Mtime, Mtime); err != nil {
			t.Fatal(err)
		}
	}
	real := testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {}},
		config.Export{Prefix: testNS.Prefix, Path: dir, ReadOnly: true})
	names := []string{"/store/sim/f99999999", "/store/sim", "/store/sim/../etc/passwd", "/store/sim/f0000001/x", "/nowhere"}
	for i := range testNS.Files {
		names = append(names, testNS.Name(i))
	}
	for _, name := range names {
		a, b := locate(t, sim.URL(), name), locate(t, real.URL, name)
		if a.code != b.code || a.loc.Status != b.loc.Status || len(a.loc.Replicas) != len(b.loc.Replicas) {
			// The export's root is a directory at the real server.
			if name == "/store/sim" && b.loc.Status == fed.Found && a.loc.Status == fed.NotFound {
				continue
			}
			t.Fatalf("%s: simulated %d %+v, real %d %+v", name, a.code, a.loc, b.code, b.loc)
		}
		if len(a.loc.Replicas) == 1 {
			x, y := a.loc.Replicas[0], b.loc.Replicas[0]
			if x.Size != y.Size || !x.ModTime.Equal(y.ModTime) || x.Role != y.Role || pathOf(x.URL) != pathOf(y.URL) {
				t.Fatalf("%s: simulated %+v, real %+v", name, x, y)
			}
		}
		for _, method := range []string{http.MethodHead, http.MethodGet} {
			ca, la := fetch(t, method, sim.URL()+name)
			cb, lb := fetch(t, method, real.URL+name)
			if ca != cb || (ca == http.StatusOK && la != lb) {
				if name == "/store/sim" || strings.Contains(name, "..") {
					continue // a directory listing; a path net/http cleans
				}
				t.Fatalf("%s %s: simulated %d (%d bytes), real %d (%d bytes)", method, name, ca, la, cb, lb)
			}
		}
	}
}

type located struct {
	code int
	loc  fed.Located
}

func locate(t *testing.T, base, p string) located {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/locate?path=" + url.QueryEscape(p))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l fed.Located
	_ = json.NewDecoder(resp.Body).Decode(&l)
	return located{resp.StatusCode, l}
}

func fetch(t *testing.T, method, u string) (int, int64) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.ContentLength
}

func pathOf(u string) string {
	x, err := url.Parse(u)
	if err != nil {
		return u
	}
	return x.Path
}

// A member joins its redirector with its digest: the redirector asks it
// only about names it holds.
func TestJoinsWithDigest(t *testing.T) {
	rd := testserver.StartRedirector(t, nil)
	sim, err := Start(Options{NS: testNS, Index: 1, Parent: rd.URL, Digest: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	held := testNS.Name(testNS.FilesOf(1)[0])
	var others []string
	for i := range testNS.Files {
		if !testNS.Holds(1, testNS.Name(i)) {
			others = append(others, testNS.Name(i))
		}
	}
	for deadline := time.Now().Add(10 * time.Second); locate(t, rd.URL, held).loc.Status != fed.Found; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the member did not join with its file")
		}
	}
	// Each try asks about another name it does not hold (the miss is
	// cached): once the digest is there, it is not asked.
	deadline := time.Now().Add(10 * time.Second)
	for k := 0; ; k++ {
		before := sim.Locates()
		if l := locate(t, rd.URL, others[k%len(others)]); l.loc.Status == fed.NotFound && sim.Locates() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no digest-answered miss within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	sim.Kill()
	deadline = time.Now().Add(5 * time.Second)
	for locate(t, rd.URL, held).loc.Status == fed.Found {
		if time.Now().After(deadline) {
			t.Fatal("a killed member still holds its files at the redirector")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package interop

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// The cmsd trees of docs/federation.md ("Joining AAA"), every one with
// XRootD 5.5's own daemons as the peers and xrdcp and wanda cp as the
// clients, byte for byte.

// An unchanged XRootD manager over wanda servers: xrdcp and xrdfs at the
// manager are sent to the wanda server that has the file; uploads land on
// one; a file removed through wanda is gone at the manager; a killed
// manager is rejoined once it restarts; HTTP through the manager's
// XrdHttp follows the same redirect.
func TestCmsdManagerOverWandaServers(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "xrdfs")
	// ofs.forward: the manager forwards its clients' namespace operations
	// to every server (XRootD's own way of removing every replica).
	m := startManager(t, xrdpeer.ManagerOptions{Export: "/store", HTTP: true, Forward: true})
	a, b, shared := randomBytes(1<<20+3, 1), randomBytes(777, 2), randomBytes(64<<10, 3)
	s1 := wandaServer(t, "/store", map[string][]byte{"/store/a.bin": a, "/store/shared.bin": shared}, "cmsd://"+m.CMS)
	s2 := wandaServer(t, "/store", map[string][]byte{"/store/sub/b.bin": b, "/store/shared.bin": shared}, "cmsd://"+m.CMS)
	waitLoggedIn(t, m, portOf(t, s1.URL), portOf(t, s2.URL))

	fetchRoot(t, m.Redirector, map[string][]byte{"/store/a.bin": a, "/store/sub/b.bin": b, "/store/shared.bin": shared})
	dir := t.TempDir()
	loc := mustRun(t, dir, "xrdfs", m.Redirector, "locate", "/store/a.bin")
	if !strings.Contains(string(loc.Stdout), ":"+strconv.Itoa(portOf(t, s1.URL))) {
		t.Errorf("xrdfs locate /store/a.bin at the manager: %q, want wanda server %s", loc.Stdout, s1.Addr)
	}

	// HTTP: XrdHttp at the manager redirects to the data port, where the
	// wanda server answers HTTP too.
	r, res := curlFor(t, cmdTimeout, "-L", m.HTTP+"/store/sub/b.bin")
	if res.Err != nil {
		t.Fatalf("curl -L through the manager's XrdHttp: %v %s", res.Err, res.Stderr)
	}
	sameBytes(t, "curl -L through XrdHttp", r.Body, b)

	// An upload through the manager lands on a wanda server.
	up := randomBytes(300<<10, 4)
	upFile := filepath.Join(dir, "up.bin")
	if err := os.WriteFile(upFile, up, 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, "xrdcp", "-f", upFile, "root://"+m.Redirector+"//store/up/new.bin")
	got1, err1 := os.ReadFile(filepath.Join(s1.Dir("/store"), "up/new.bin"))
	got2, err2 := os.ReadFile(filepath.Join(s2.Dir("/store"), "up/new.bin"))
	switch {
	case err1 == nil:
		sameBytes(t, "upload through the manager (server 1)", got1, up)
	case err2 == nil:
		sameBytes(t, "upload through the manager (server 2)", got2, up)
	default:
		t.Fatalf("the upload through the manager is on neither wanda server: %v, %v", err1, err2)
	}
	fetchRoot(t, m.Redirector, map[string][]byte{"/store/up/new.bin": up})

	// Removed through wanda: gone, and the manager stops sending
	// clients there.
	req, _ := http.NewRequest(http.MethodDelete, s1.URL+"/store/a.bin", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE at the wanda server: %v %v", resp, err)
	}
	resp.Body.Close()
	waitFor(t, cmsdWait, "the manager to forget /store/a.bin", func() bool {
		return runFor(t, 20*time.Second, dir, "xrdfs", m.Redirector, "locate", "/store/a.bin").Err != nil
	})
	if r := run(t, dir, "xrdcp", "-f", "root://"+m.Redirector+"//store/a.bin", filepath.Join(dir, "gone")); r.Err == nil {
		t.Error("xrdcp of a removed file through the manager succeeded")
	}

	// Forwarded by the manager: rm removes every wanda server's replica,
	// mkdir makes the directory on each.
	mustRun(t, dir, "xrdfs", m.Redirector, "rm", "/store/shared.bin")
	mustRun(t, dir, "xrdfs", m.Redirector, "mkdir", "/store/made")
	for _, s := range []string{s1.Dir("/store"), s2.Dir("/store")} {
		waitFor(t, cmsdWait, "the forwarded rm and mkdir at "+s, func() bool {
			_, err1 := os.Stat(filepath.Join(s, "shared.bin"))
			fi, err2 := os.Stat(filepath.Join(s, "made"))
			return os.IsNotExist(err1) && err2 == nil && fi.IsDir()
		})
	}

	// A wanda server killed (SIGKILL: no goodbye) is logged out by the
	// manager at once (its connection closed): no client is sent there
	// (XRootD makes them wait for it instead); the others serve on.
	kdir := t.TempDir()
	k := randomBytes(4096, 13)
	putFiles(t, kdir, "/store", map[string][]byte{"/k.bin": k})
	victim := startChild(t, "server", "--listen", "127.0.0.1:0", "--log-format", "json", "--export", "/store="+kdir, "--join", "cmsd://"+m.CMS)
	waitLoggedIn(t, m, portOf(t, victim.URL))
	fetchRoot(t, m.Redirector, map[string][]byte{"/store/k.bin": k})
	pid := victim.Pid()
	victim.Kill(t)
	waitFor(t, cmsdWait, "the manager to log the killed server out", func() bool {
		for _, line := range strings.Split(xrdpeer.Tail(m.CmsLog, 200), "\n") {
			if strings.Contains(line, "server."+strconv.Itoa(pid)+":") && strings.Contains(line, "logged out") {
				return true
			}
		}
		return false
	})
	fetchRoot(t, m.Redirector, map[string][]byte{"/store/sub/b.bin": b})

	// The manager dies and comes back: the members log in again and
	// clients are served again.
	m.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, cmsdWait, "clients served again after the manager restarted", func() bool {
		return runFor(t, 20*time.Second, dir, "xrdcp", "-f", "root://"+m.Redirector+"//store/sub/b.bin", filepath.Join(dir, "again")).Err == nil
	})
	t.Logf("served again %v after the manager restarted", time.Since(start).Round(time.Millisecond))
	sameBytes(t, "after the manager restarted", readFile(t, filepath.Join(dir, "again")), b)
}

// An XRootD meta-manager over a wanda site redirector over wanda servers
// (a wanda site in AAA): the meta-manager sends clients to the wanda
// redirector, which sends them to its server.
func TestCmsdMetaManagerOverWandaSite(t *testing.T) {
	requireTool(t, "xrdcp")
	meta := startManager(t, xrdpeer.ManagerOptions{Export: "/store", Meta: true})
	site := wandaRedirector(t, false, "cmsd://"+meta.CMS)
	f, g := randomBytes(200<<10, 5), randomBytes(10, 6)
	s1 := wandaServer(t, "/store", map[string][]byte{"/store/f.bin": f}, site.URL)
	s2 := wandaServer(t, "/store", map[string][]byte{"/store/g.bin": g}, site.URL)
	waitMember(t, site.URL, s1.URL, false)
	waitMember(t, site.URL, s2.URL, false)
	waitLoggedIn(t, meta, portOf(t, site.URL))
	fetchRoot(t, meta.Redirector, map[string][]byte{"/store/f.bin": f, "/store/g.bin": g})
}

// A wanda redirector over XRootD data servers (cmsd logins at
// --cmsd-listen): root:// and HTTP clients are sent to them, a miss is a
// fast 404, a file removed at a server is gone, and a killed server is
// dropped.
func TestCmsdWandaRedirectorOverXRootDServers(t *testing.T) {
	requireTool(t, "xrdcp")
	requireTool(t, "xrdfs")
	rd := testserverRedirectorCmsd(t, 3*time.Second)
	f1, f2 := randomBytes(1<<20, 7), randomBytes(3000, 8)
	n1 := startNode(t, rd.App.CmsdAddr(), "/store", map[string][]byte{"/store/one.bin": f1}, true)
	n2 := startNode(t, rd.App.CmsdAddr(), "/store", map[string][]byte{"/store/two.bin": f2}, false)
	id1, id2 := "root://"+n1.Addr, "root://"+n2.Addr
	waitMember(t, rd.URL, id1, false)
	waitMember(t, rd.URL, id2, false)
	ms := redirectorMembers(t, rd.URL)
	if m := ms[id1]; !strings.HasPrefix(m.URL, "http://") || m.XRootD != n1.Addr || m.Labels["cmsd"] != "server" {
		t.Errorf("an XRootD server with XrdHttp: %+v", m)
	}
	if m := ms[id2]; m.URL != id2 {
		t.Errorf("an XRootD server without HTTP: %+v", m)
	}
	fetchRoot(t, rd.Addr, map[string][]byte{"/store/one.bin": f1, "/store/two.bin": f2})
	r, res := curlFor(t, cmdTimeout, "-L", rd.URL+"/store/one.bin")
	if res.Err != nil {
		t.Fatalf("curl -L: %v %s", res.Err, res.Stderr)
	}
	sameBytes(t, "curl -L to an XRootD server's XrdHttp", r.Body, f1)

	// A miss is answered by the data servers' kXR_stat, long before
	// cmsd_wait (3 s) would end a wait for a have.
	start := time.Now()
	r, _ = curlFor(t, cmdTimeout, rd.URL+"/store/none.bin")
	if r.Status != http.StatusNotFound {
		t.Errorf("a missing file: %d, want 404", r.Status)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a missing file took %v: the servers' definitive answer was not used", d)
	}

	// Removed at the XRootD server: its cmsd's gone reaches wanda.
	dir := t.TempDir()
	mustRun(t, dir, "xrdfs", n2.Addr, "rm", "/store/two.bin")
	waitFor(t, cmsdWait, "the redirector to forget /store/two.bin", func() bool {
		r, _ := curlFor(t, cmdTimeout, rd.URL+"/store/two.bin")
		return r.Status == http.StatusNotFound
	})

	// A killed server is dropped at once: no client is sent there.
	n1.Kill()
	waitMember(t, rd.URL, id1, true)
	r, _ = curlFor(t, cmdTimeout, rd.URL+"/store/one.bin")
	if r.Status != http.StatusNotFound {
		t.Errorf("a file of a killed server: %d, want 404", r.Status)
	}
}

// A wanda global redirector over an XRootD site (a manager with
// `all.manager meta` and its server) and a wanda site: one tree.
func TestCmsdWandaGlobalOverMixedSites(t *testing.T) {
	requireTool(t, "xrdcp")
	global := testserverRedirectorCmsd(t, 3*time.Second)
	xsite := startManager(t, xrdpeer.ManagerOptions{Export: "/store/x", Parent: global.App.CmsdAddr()})
	fx := randomBytes(100<<10, 9)
	startNode(t, xsite.CMS, "/store/x", map[string][]byte{"/store/x/f.bin": fx}, false)
	wsite := wandaRedirector(t, false, global.URL)
	fw := randomBytes(50<<10, 10)
	ws := wandaServer(t, "/store/w", map[string][]byte{"/store/w/g.bin": fw}, wsite.URL)
	waitMember(t, wsite.URL, ws.URL, false)
	waitMember(t, global.URL, "root://"+xsite.Redirector, false)
	waitMember(t, global.URL, wsite.URL, false)
	fetchRoot(t, global.Addr, map[string][]byte{"/store/x/f.bin": fx, "/store/w/g.bin": fw})
}

// CMS's AAA shape: an XRootD meta-manager over an XRootD site and a
// wanda site.
func TestCmsdMetaManagerOverMixedSites(t *testing.T) {
	requireTool(t, "xrdcp")
	meta := startManager(t, xrdpeer.ManagerOptions{Export: "/store", Meta: true})
	xsite := startManager(t, xrdpeer.ManagerOptions{Export: "/store/x", Parent: meta.CMS})
	fx := randomBytes(100<<10, 11)
	startNode(t, xsite.CMS, "/store/x", map[string][]byte{"/store/x/f.bin": fx}, false)
	wsite := wandaRedirector(t, false, "cmsd://"+meta.CMS)
	fw := randomBytes(60<<10, 12)
	ws := wandaServer(t, "/store/w", map[string][]byte{"/store/w/g.bin": fw}, wsite.URL)
	waitMember(t, wsite.URL, ws.URL, false)
	waitLoggedIn(t, meta, portOf(t, wsite.URL), portOf(t, xsite.Redirector))
	fetchRoot(t, meta.Redirector, map[string][]byte{"/store/x/f.bin": fx, "/store/w/g.bin": fw})
}

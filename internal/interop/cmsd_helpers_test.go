package interop

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// cmsdWait bounds the waits of the cmsd tests: logins, a manager's
// startup delay, a restarted manager.
const cmsdWait = 45 * time.Second

// startManager starts an XRootD redirector (xrootd + cmsd) for the test.
func startManager(t *testing.T, o xrdpeer.ManagerOptions) *xrdpeer.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := xrdpeer.StartManager(ctx, o)
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("manager %s cmsd log:\n%s", m.CMS, xrdpeer.Tail(m.CmsLog, 40))
		}
		m.Close()
	})
	return m
}

// startNode starts an XRootD data server logged in to manager, serving
// files (logical name -> bytes) under export.
func startNode(t *testing.T, manager, export string, files map[string][]byte, http bool) *xrdpeer.Server {
	t.Helper()
	dir := t.TempDir()
	putFiles(t, dir, export, files)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := xrdpeer.StartNode(ctx, xrdpeer.NodeOptions{Manager: manager, Dir: dir, Export: export, HTTP: http, Writable: true})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// putFiles writes files (logical names) into dir as a server of
// prefix maps them (dir holds what is under prefix for a wanda export,
// the whole namespace for XRootD's oss.localroot: root says which).
func putFiles(t *testing.T, dir, _ string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// wandaServer serves files under prefix (logical names) and joins the
// given parents (http:// redirectors, cmsd:// managers).
func wandaServer(t *testing.T, prefix string, files map[string][]byte, join ...string) *testserver.Server {
	t.Helper()
	dir := t.TempDir()
	sub := map[string][]byte{}
	for name, data := range files {
		sub[strings.TrimPrefix(name, prefix)] = data
	}
	putFiles(t, dir, prefix, sub)
	return testserver.StartWith(t, testserver.Options{Configure: func(c *config.Config) {
		c.Server.Federation.Join = join
		c.Server.Federation.Heartbeat = 500 * time.Millisecond
	}}, config.Export{Prefix: prefix, Path: dir})
}

// wandaRedirector runs a redirector joining the given parents; with
// cmsd it takes cmsd logins on a loopback port (App.CmsdAddr).
func wandaRedirector(t *testing.T, cmsd bool, join ...string) *testserver.Redirector {
	t.Helper()
	return testserver.StartRedirector(t, func(c *config.Config) {
		r := &c.Redirector
		r.Join = join
		r.Heartbeat = 500 * time.Millisecond
		if cmsd {
			r.CmsdListen = "127.0.0.1:0"
		}
	})
}

// portOf is the port of a URL or host:port.
func portOf(t *testing.T, s string) int {
	t.Helper()
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	_, p, err := net.SplitHostPort(strings.TrimSuffix(s, "/"))
	n, _ := strconv.Atoi(p)
	if err != nil || n == 0 {
		t.Fatalf("no port in %q", s)
	}
	return n
}

// waitLoggedIn waits until manager's cmsd logged in the members with
// data ports ports.
func waitLoggedIn(t *testing.T, m *xrdpeer.Manager, ports ...int) {
	t.Helper()
	for _, p := range ports {
		waitFor(t, cmsdWait, "a login from data port "+strconv.Itoa(p)+" at "+m.CMS, func() bool { return m.LoggedIn(p) })
	}
}

// redirectorMembers is a wanda redirector's members, by ID.
func redirectorMembers(t *testing.T, base string) map[string]fed.MemberStatus {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/members")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ms []fed.MemberStatus
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		t.Fatal(err)
	}
	out := map[string]fed.MemberStatus{}
	for _, m := range ms {
		out[m.ID] = m
	}
	return out
}

// waitMember waits until the redirector lists id healthy and not
// drained or suspended (or, gone, until it lists it no more).
func waitMember(t *testing.T, base, id string, gone bool) {
	t.Helper()
	what := "member " + id + " at " + base
	if gone {
		what += " to be dropped"
	}
	waitFor(t, cmsdWait, what, func() bool {
		m, ok := redirectorMembers(t, base)[id]
		if gone {
			return !ok
		}
		return ok && m.Healthy && !m.Drained
	})
}

// fetchRoot reads every file through root://entry (host:port) with
// xrdcp and with wanda cp, and checks the bytes.
func fetchRoot(t *testing.T, entry string, files map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	for name, want := range files {
		u := "root://" + entry + "/" + name
		dst := filepath.Join(dir, strings.ReplaceAll(name, "/", "_"))
		mustRun(t, dir, "xrdcp", "-f", u, dst)
		sameBytes(t, "xrdcp "+u, readFile(t, dst), want)
		dst2 := dst + ".wanda"
		wandaCp(t, "--checksum", "none", u, dst2)
		sameBytes(t, "wanda cp "+u, readFile(t, dst2), want)
	}
}

// testserverRedirectorCmsd runs a redirector taking cmsd logins, with
// cmsd_wait set when wait is positive.
func testserverRedirectorCmsd(t *testing.T, wait time.Duration) *testserver.Redirector {
	t.Helper()
	return testserver.StartRedirector(t, func(c *config.Config) {
		r := &c.Redirector
		r.Heartbeat = 500 * time.Millisecond
		r.CmsdListen = "127.0.0.1:0"
		if wait > 0 {
			r.CmsdWait = wait
			r.LookupTimeout = 2 * wait
		}
	})
}

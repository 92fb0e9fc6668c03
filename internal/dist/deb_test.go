//go:build packaging

package dist

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What the .deb puts on a machine, or makes there, outside dpkg's own
// database: all must be absent before the test and are gone after it.
var debTouches = []string{"/etc/wanda", "/var/lib/wanda", "/var/log/wanda", "/var/cache/wanda", "/srv/wanda", "/usr/bin/wanda", "/usr/local/bin/wanda"}

// debGuard refuses a machine where wanda is, or was, installed: the test
// installs and purges the package and would take the admin's with it. It
// then cleans up after the test whatever happens: purge, the user and
// group, the directories.
func debGuard(t *testing.T) {
	t.Helper()
	var found []string
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "wanda").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		found = append(found, "the wanda package ("+strings.TrimSpace(string(out))+")")
	}
	if _, err := user.Lookup("wanda"); err == nil {
		found = append(found, "a user wanda")
	}
	if _, err := user.LookupGroup("wanda"); err == nil {
		found = append(found, "a group wanda")
	}
	for _, p := range debTouches {
		if exists(p) {
			found = append(found, p)
		}
	}
	if len(found) > 0 {
		t.Fatalf("this machine has %s: the packaging test installs and purges wanda's package and would touch them; run it where wanda is not installed (CI)", strings.Join(found, ", "))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "wanda").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
			if out, err := exec.Command("dpkg", "--purge", "wanda").CombinedOutput(); err != nil {
				t.Errorf("cleanup: dpkg --purge wanda: %v\n%s", err, out)
			}
		}
		for _, p := range debTouches {
			_ = os.RemoveAll(p)
		}
		if _, err := user.Lookup("wanda"); err == nil {
			_ = exec.Command("userdel", "wanda").Run()
		}
		if _, err := user.LookupGroup("wanda"); err == nil {
			_ = exec.Command("groupdel", "wanda").Run()
		}
	})
}

func dpkgStatus(t *testing.T) string {
	t.Helper()
	out, _ := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Version}", "wanda").Output()
	return strings.TrimSpace(string(out))
}

// The .deb as an admin meets it: install, the binary on PATH, the example
// configuration checked, the server started as the unit starts it (as
// wanda, the packaged config) and read from, the units verified; an
// upgrade that keeps an edited configuration; remove, then purge.
func TestDeb(t *testing.T) {
	dist, version := artifacts(t)
	debGuard(t)
	deb := filepath.Join(dist, PackageFile("deb", version, runtime.GOARCH))

	run(t, "dpkg", "-i", deb)
	if st := dpkgStatus(t); !strings.HasPrefix(st, "ii ") {
		t.Fatalf("after dpkg -i: %q", st)
	}

	// wanda from PATH (root's), the version it was built as.
	path, err := exec.LookPath("wanda")
	if err != nil || path != "/usr/bin/wanda" {
		t.Fatalf("wanda on PATH: %q %v", path, err)
	}
	if out := run(t, "wanda", "version"); !strings.HasPrefix(out, "wanda version "+version+"\n") {
		t.Errorf("wanda version: %q", out)
	}

	// The user and what the maintainer scripts made, owned right.
	wu, err := user.Lookup("wanda")
	if err != nil {
		t.Fatal(err)
	}
	if id := atoi(wu.Uid); id == 0 || id >= 1000 {
		t.Errorf("wanda's uid %d: not a system user", id)
	}
	for dir, want := range map[string]os.FileMode{"/var/lib/wanda": 0o750, "/var/log/wanda": 0o750, "/srv/wanda/store": 0o755, "/srv/wanda/test": 0o755} {
		uid, gid, perm := owner(t, dir)
		if int(uid) != atoi(wu.Uid) || int(gid) != atoi(wu.Gid) || perm != want {
			t.Errorf("%s: %d:%d %v, want wanda's, %v", dir, uid, gid, perm, want)
		}
	}
	conf := run(t, "dpkg-query", "-W", "-f", "${Conffiles}", "wanda")
	for _, c := range []string{"/etc/wanda/server.yaml", "/etc/wanda/redirector.yaml", "/etc/wanda/cache.yaml", "/etc/logrotate.d/wanda"} {
		if !strings.Contains(conf, c+" ") {
			t.Errorf("%s is not a conffile:\n%s", c, conf)
		}
	}
	// Units installed, none enabled.
	for _, u := range Units {
		if !exists("/usr/lib/systemd/system/" + u) {
			t.Errorf("%s not installed", u)
		}
		if m, _ := filepath.Glob("/etc/systemd/system/*.wants/" + u); len(m) > 0 {
			t.Errorf("%s enabled by the install: %v", u, m)
		}
	}
	checkDocs(t)

	// The checks and the server, in a namespace of their own: the example
	// configuration joins a redirector and trusts an issuer that are not
	// there, and its port is fixed.
	ns := newNetns(t)
	check := exec.Command("/usr/bin/wanda", "server", "--check", "--config", "/etc/wanda/server.yaml")
	check.SysProcAttr, check.Env = asUser(t, "wanda"), systemdEnv
	var checkOut strings.Builder
	check.Stdout, check.Stderr = &checkOut, &checkOut
	ns.do(func() { err = check.Run() })
	if err != nil || !strings.Contains(checkOut.String(), "the configuration is valid") {
		t.Fatalf("wanda server --check --config /etc/wanda/server.yaml (as wanda): %v\n%s", err, checkOut.String())
	}
	serveAsUnit(t, ns)

	verifyUnits(t)

	// Upgrade to a second build over an edited configuration: kept, no
	// question asked (stdin is not a terminal), the user unchanged.
	edited := strings.Replace(readFile(t, "/etc/wanda/server.yaml"), "level: info", "level: debug", 1) + "# edited by the admin\n"
	if err := os.WriteFile("/etc/wanda/server.yaml", []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	next := secondBuild(t)
	run(t, "dpkg", "-i", next)
	if st := dpkgStatus(t); st != "ii  99999.0.0" {
		t.Errorf("after the upgrade: %q", st)
	}
	if got := readFile(t, "/etc/wanda/server.yaml"); got != edited {
		t.Errorf("the upgrade replaced the edited /etc/wanda/server.yaml:\n%s", got)
	}
	if m, _ := filepath.Glob("/etc/wanda/*.dpkg-*"); len(m) > 0 {
		t.Errorf("the upgrade left %v", m)
	}
	if out := run(t, "wanda", "version"); !strings.HasPrefix(out, "wanda version v99999.0.0\n") {
		t.Errorf("after the upgrade, wanda version: %q", out)
	}
	if u, err := user.Lookup("wanda"); err != nil || u.Uid != wu.Uid {
		t.Errorf("after the upgrade, user wanda: %v %v", u, err)
	}

	// Remove: the program goes; configuration, user, state, records and
	// data stay.
	run(t, "dpkg", "-r", "wanda")
	if st := dpkgStatus(t); !strings.HasPrefix(st, "rc ") {
		t.Errorf("after dpkg -r: %q", st)
	}
	for _, gone := range []string{"/usr/bin/wanda", "/usr/lib/systemd/system/wanda-server.service", "/usr/share/man/man1/wanda.1.gz"} {
		if exists(gone) {
			t.Errorf("after dpkg -r: %s is still there", gone)
		}
	}
	for _, kept := range []string{"/etc/wanda/server.yaml", "/var/lib/wanda", "/var/log/wanda/server.records.jsonl", "/srv/wanda/store/pkgtest.txt"} {
		if !exists(kept) {
			t.Errorf("after dpkg -r: %s is gone", kept)
		}
	}
	if _, err := user.Lookup("wanda"); err != nil {
		t.Errorf("after dpkg -r: %v", err)
	}

	// Purge with data under /srv/wanda: configuration, state and records
	// go; the data stays, and the user that owns it.
	run(t, "dpkg", "-P", "wanda")
	if st := dpkgStatus(t); strings.HasPrefix(st, "ii") || strings.HasPrefix(st, "rc") {
		t.Errorf("after dpkg -P: %q", st)
	}
	for _, gone := range []string{"/etc/wanda", "/var/lib/wanda", "/var/log/wanda", "/etc/logrotate.d/wanda"} {
		if exists(gone) {
			t.Errorf("after dpkg -P: %s is still there", gone)
		}
	}
	if !exists("/srv/wanda/store/pkgtest.txt") {
		t.Error("dpkg -P deleted data under /srv/wanda")
	}
	if _, err := user.Lookup("wanda"); err != nil {
		t.Errorf("dpkg -P removed the user that owns the data under /srv/wanda: %v", err)
	}

	// Install again (the user and data found, kept), the data moved away
	// by the admin, purge: nothing of wanda is left.
	run(t, "dpkg", "-i", deb)
	if u, err := user.Lookup("wanda"); err != nil || u.Uid != wu.Uid {
		t.Errorf("reinstall: user wanda %v %v", u, err)
	}
	if err := os.Remove("/srv/wanda/store/pkgtest.txt"); err != nil {
		t.Fatal(err)
	}
	run(t, "dpkg", "-P", "wanda")
	for _, p := range debTouches {
		if exists(p) {
			t.Errorf("after the last purge: %s is still there", p)
		}
	}
	if _, err := user.Lookup("wanda"); err == nil {
		t.Error("after the last purge: user wanda is still there")
	}
	if _, err := user.LookupGroup("wanda"); err == nil {
		t.Error("after the last purge: group wanda is still there")
	}
}

// serveAsUnit starts the installed server as wanda-server.service would
// (its ExecStartPre, then its ExecStart, as User=wanda with the packaged
// config) in ns, reads a file from it, and stops it with SIGTERM.
func serveAsUnit(t *testing.T, ns *netns) {
	t.Helper()
	const body = "served by the installed package\n"
	if err := os.WriteFile("/srv/wanda/store/pkgtest.txt", []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	pre, start := execLines(t, "/usr/lib/systemd/system/wanda-server.service")
	if strings.Join(start, " ") != "/usr/bin/wanda server --config /etc/wanda/server.yaml" {
		t.Errorf("wanda-server.service ExecStart: %q", start)
	}
	if pre != nil {
		c := exec.Command(pre[0], pre[1:]...)
		c.SysProcAttr, c.Env, c.Dir = asUser(t, "wanda"), systemdEnv, "/"
		var err error
		var out []byte
		ns.do(func() { out, err = c.CombinedOutput() })
		if err != nil {
			t.Fatalf("ExecStartPre %v: %v\n%s", pre, err, out)
		}
	}
	c := exec.Command(start[0], start[1:]...)
	c.SysProcAttr, c.Env, c.Dir = asUser(t, "wanda"), systemdEnv, "/"
	p := startProcess(t, ns, c)
	// The packaged config listens on [::]:1094.
	if got := ns.get(t, "http://127.0.0.1:1094/store/pkgtest.txt", 20*time.Second); got != body {
		t.Errorf("GET /store/pkgtest.txt from the installed server: %q", got)
	}
	p.stop(t)
	// Its records, written as wanda into the directory the package made.
	if b := readFile(t, "/var/log/wanda/server.records.jsonl"); !strings.Contains(b, "/store/pkgtest.txt") {
		t.Errorf("no record of the read in /var/log/wanda/server.records.jsonl:\n%s\nserver output:\n%s", b, p.out)
	}
}

// verifyUnits runs systemd-analyze verify on the installed units; only
// lines naming the unit count (it also speaks of units it cannot see on a
// machine without systemd running, as in CI).
func verifyUnits(t *testing.T) {
	t.Helper()
	for _, u := range Units {
		path := "/usr/lib/systemd/system/" + u
		out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
		var problems []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, u) {
				problems = append(problems, l)
			}
		}
		if err != nil || len(problems) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", path, err, out)
		}
	}
}

// checkDocs: the man pages are man pages of the command tree, the
// completions load in bash.
func checkDocs(t *testing.T) {
	t.Helper()
	for _, page := range []string{"wanda.1.gz", "wanda-server.1.gz", "wanda-cp.1.gz"} {
		f, err := os.Open("/usr/share/man/man1/" + page)
		if err != nil {
			t.Error(err)
			continue
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		f.Close()
		if err != nil || !strings.Contains(string(b), `.TH "WANDA" "1"`) {
			t.Errorf("%s: %v\n%.200s", page, err, b)
		}
	}
	out := run(t, "bash", "-c", "source /usr/share/bash-completion/completions/wanda && complete -p wanda")
	if !strings.Contains(out, "complete ") || !strings.HasSuffix(strings.TrimSpace(out), " wanda") {
		t.Errorf("bash completion: %q", out)
	}
	for _, f := range []string{"/usr/share/zsh/vendor-completions/_wanda", "/usr/share/fish/vendor_completions.d/wanda.fish", "/usr/share/doc/wanda/install.md"} {
		if !exists(f) {
			t.Errorf("%s not installed", f)
		}
	}
}

// secondBuild builds the host's .deb as version v99999.0.0 (a later
// release than any this repository has) from the same tree.
func secondBuild(t *testing.T) string {
	t.Helper()
	const v = "v99999.0.0"
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := Build(ctx, Options{Root: repoRoot(t), Out: out, Version: v, Commit: time.Unix(1795734422, 0),
		LDFlags: "-s -w -X github.com/wanda-fed/wanda/internal/cli.Version=" + v, Arches: []string{runtime.GOARCH}, PackagesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(out, PackageFile("deb", v, runtime.GOARCH))
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

//go:build packaging

package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// debFiles lists a .deb's regular files, as absolute paths.
func debFiles(t *testing.T, deb string) []string {
	t.Helper()
	var files []string
	for _, l := range strings.Split(run(t, "dpkg-deb", "-c", deb), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[0], "-") {
			continue
		}
		files = append(files, strings.TrimPrefix(f[5], "."))
	}
	slices.Sort(files)
	return files
}

// The .rpm describes what the .deb does: the same files (zsh's completion
// where each family keeps it), the same configuration files, scripts for
// the same steps; each architecture's binary is its own; and it installs
// into a scratch root, its scripts making the user and directories there.
func TestRPM(t *testing.T) {
	dist, version := artifacts(t)
	for _, arch := range []string{"amd64", "arm64"} {
		rpm := filepath.Join(dist, PackageFile("rpm", version, arch))
		deb := filepath.Join(dist, PackageFile("deb", version, arch))
		info := run(t, "rpm", "-qip", rpm)
		debVersion := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Version"))
		for _, want := range []string{"Name        : wanda", "Version     : " + debVersion, "Release     : 1", "Architecture: " + pkgArch["rpm"][arch], "Build Host  : reproducible", "URL         : " + homepage} {
			if !strings.Contains(info, want+"\n") {
				t.Errorf("rpm -qip %s: no %q:\n%s", filepath.Base(rpm), want, info)
			}
		}
		var rpmFiles []string
		for _, f := range strings.Fields(run(t, "rpm", "-qp", "--qf", `[%{FILEMODES:perms}:%{FILENAMES}\n]`, rpm)) {
			perms, name, _ := strings.Cut(f, ":")
			if strings.HasPrefix(perms, "-") {
				rpmFiles = append(rpmFiles, strings.Replace(name, "/zsh/site-functions/", "/zsh/vendor-completions/", 1))
			}
		}
		slices.Sort(rpmFiles)
		if df := debFiles(t, deb); !slices.Equal(rpmFiles, df) {
			t.Errorf("%s and %s list different files:\nrpm %v\ndeb %v", filepath.Base(rpm), filepath.Base(deb), rpmFiles, df)
		}
		if l := run(t, "rpm", "-qlp", rpm); !strings.Contains(l, "/usr/bin/wanda\n") || !strings.Contains(l, "/etc/wanda\n") {
			t.Errorf("rpm -qlp: %s", l)
		}
		// Configuration files: %config(noreplace) in the rpm, conffiles in the deb.
		var noreplace []string
		for _, l := range strings.Split(strings.TrimSpace(run(t, "rpm", "-qp", "--qf", `[%{FILEFLAGS:fflags} %{FILENAMES}\n]`, rpm)), "\n") {
			if flags, name, _ := strings.Cut(l, " "); strings.Contains(flags, "c") && strings.Contains(flags, "n") {
				noreplace = append(noreplace, name)
			}
		}
		ctl := t.TempDir()
		run(t, "dpkg-deb", "-e", deb, ctl)
		conffiles := strings.Fields(readFile(t, filepath.Join(ctl, "conffiles")))
		slices.Sort(noreplace)
		slices.Sort(conffiles)
		if len(noreplace) != 4 || !slices.Equal(noreplace, conffiles) {
			t.Errorf("rpm %%config(noreplace) %v, deb conffiles %v", noreplace, conffiles)
		}
		scripts := run(t, "rpm", "-qp", "--scripts", rpm)
		for _, s := range []string{"preinstall scriptlet", "postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet", "useradd --system", "install -d -m 0750 -o wanda -g wanda"} {
			if !strings.Contains(scripts, s) {
				t.Errorf("rpm -qp --scripts %s: no %q:\n%s", filepath.Base(rpm), s, scripts)
			}
		}
		debScripts := readFile(t, filepath.Join(ctl, "postinst"))
		for _, s := range []string{"useradd --system", "install -d -m 0750 -o wanda -g wanda"} {
			if !strings.Contains(debScripts, s) {
				t.Errorf("deb postinst: no %q", s)
			}
		}
		if arch == runtime.GOARCH {
			rpmScratchInstall(t, rpm)
		} else {
			// Another architecture: unpacked without its scripts, to read the binary.
			root := t.TempDir()
			run(t, "rpm", "-i", "--root", root, "--nodeps", "--ignorearch", "--noscripts", rpm)
			if m := elfMachine(t, filepath.Join(root, "usr/bin/wanda")); m != arch {
				t.Errorf("%s: its wanda is for %s", filepath.Base(rpm), m)
			}
			x := t.TempDir()
			run(t, "dpkg-deb", "-x", deb, x)
			if m := elfMachine(t, filepath.Join(x, "usr/bin/wanda")); m != arch {
				t.Errorf("%s: its wanda is for %s", filepath.Base(deb), m)
			}
		}
	}
}

// rpmScratchInstall installs the rpm with `rpm -i --root SCRATCH --nodeps`
// into a root that has what an EL base system gives the scripts (sh,
// getent, groupadd, useradd, install and their libraries, copied from
// this machine) and nothing else, then erases it.
func rpmScratchInstall(t *testing.T, rpm string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "var/lib/rpm", "run", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n",
		"etc/shadow": "root:*:19000:0:99999:7:::\n", "etc/gshadow": "root:*::\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\n",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"sh", "getent", "groupadd", "useradd", "userdel", "groupdel", "install", "rm", "rmdir"} {
		copyWithLibs(t, root, tool)
	}
	if exists("/etc/login.defs") {
		copyFile(t, "/etc/login.defs", filepath.Join(root, "etc/login.defs"))
	}

	out, err := exec.Command("rpm", "-i", "--root", root, "--nodeps", rpm).CombinedOutput()
	if err != nil {
		t.Fatalf("rpm -i --root %s --nodeps %s: %v\n%s", root, filepath.Base(rpm), err, out)
	}
	run(t, "rpm", "--root", root, "-q", "wanda")
	passwd := readFile(t, filepath.Join(root, "etc/passwd"))
	if !strings.Contains(passwd, "\nwanda:x:") || !strings.Contains(passwd, ":/var/lib/wanda:/usr/sbin/nologin\n") {
		t.Errorf("the rpm's %%pre made no wanda user in the root:\n%s", passwd)
	}
	var uid string
	for _, l := range strings.Split(passwd, "\n") {
		if f := strings.Split(l, ":"); len(f) > 3 && f[0] == "wanda" {
			uid = f[2]
		}
	}
	for _, d := range []string{"var/lib/wanda", "var/log/wanda", "srv/wanda/store"} {
		u, _, _ := owner(t, filepath.Join(root, d))
		if uid == "" || strings.TrimSpace(uid) != strconv.FormatUint(uint64(u), 10) {
			t.Errorf("%s in the root: owner %d, want wanda (%s)", d, u, uid)
		}
	}
	for _, f := range []string{"usr/bin/wanda", "etc/wanda/server.yaml", "usr/lib/systemd/system/wanda-server.service"} {
		if !exists(filepath.Join(root, f)) {
			t.Errorf("%s not in the root", f)
		}
	}
	// Erase: the program goes; the user and state stay (rpm has no purge).
	run(t, "rpm", "-e", "--root", root, "wanda")
	if exists(filepath.Join(root, "usr/bin/wanda")) || !exists(filepath.Join(root, "var/lib/wanda")) {
		t.Error("rpm -e: wanda's binary kept or its state removed")
	}
}

// copyWithLibs copies a tool of this machine and the shared libraries
// ldd names into root, at the same paths.
func copyWithLibs(t *testing.T, root, tool string) {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	copyFile(t, p, filepath.Join(root, p))
	out, _ := exec.Command("ldd", p).Output() // a static binary: nothing to copy
	for _, l := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "/") {
				copyFile(t, f, filepath.Join(root, f))
			}
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

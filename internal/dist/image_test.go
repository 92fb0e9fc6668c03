//go:build packaging

package dist

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The image as a runtime meets it: unpacked by umoci for each
// architecture, its config non-root with the entrypoint, volumes and
// labels; the host's binary runs from the unpacked root (chroot, as the
// image's user) and serves a file put in its volume.
func TestImage(t *testing.T) {
	dist, version := artifacts(t)
	layoutDir := t.TempDir()
	run(t, "tar", "-xf", filepath.Join(dist, ImageFile(version)), "-C", layoutDir)
	var index struct {
		Manifests []struct {
			MediaType   string            `json:"mediaType"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(layoutDir, "index.json"))), &index); err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, m := range index.Manifests {
		refs[m.Annotations[refName]] = m.MediaType
	}
	if refs[version] != "application/vnd.oci.image.index.v1+json" || refs[version+"-amd64"] == "" || refs[version+"-arm64"] == "" {
		t.Fatalf("index.json names %v; want the multi-arch index as %s and each architecture's image", refs, version)
	}

	for _, arch := range []string{"amd64", "arm64"} {
		bundle := filepath.Join(t.TempDir(), "bundle")
		run(t, "umoci", "unpack", "--image", layoutDir+":"+version+"-"+arch, bundle)
		var spec struct {
			Process struct {
				User struct{ UID, GID uint32 } `json:"user"`
				Args []string                  `json:"args"`
				Env  []string                  `json:"env"`
				Cwd  string                    `json:"cwd"`
			} `json:"process"`
			Mounts []struct {
				Destination string `json:"destination"`
			} `json:"mounts"`
			Annotations map[string]string `json:"annotations"`
		}
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(bundle, "config.json"))), &spec); err != nil {
			t.Fatal(err)
		}
		p := spec.Process
		if p.User.UID == 0 || p.User.GID == 0 {
			t.Errorf("%s: runs as %d:%d, want a non-root user", arch, p.User.UID, p.User.GID)
		}
		if len(p.Args) == 0 || p.Args[0] != "/usr/bin/wanda" {
			t.Errorf("%s: entrypoint %v", arch, p.Args)
		}
		var mounts []string
		for _, m := range spec.Mounts {
			mounts = append(mounts, m.Destination)
		}
		if !slices.Contains(mounts, "/etc/wanda") || !slices.Contains(mounts, "/var/lib/wanda") {
			t.Errorf("%s: volumes (mounts) %v, want /etc/wanda and /var/lib/wanda", arch, mounts)
		}
		a := spec.Annotations
		if a["org.opencontainers.image.version"] != version || a["org.opencontainers.image.source"] != homepage ||
			a["org.opencontainers.image.licenses"] == "" || a["org.opencontainers.image.architecture"] != arch {
			t.Errorf("%s: labels %v", arch, a)
		}
		rootfs := filepath.Join(bundle, "rootfs")
		if m := elfMachine(t, filepath.Join(rootfs, "usr/bin/wanda")); m != arch {
			t.Errorf("%s image: its wanda is for %s", arch, m)
		}
		if uid, _, _ := owner(t, filepath.Join(rootfs, "var/lib/wanda")); uid != p.User.UID {
			t.Errorf("%s: /var/lib/wanda owned by %d, the image's user is %d", arch, uid, p.User.UID)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(readFile(t, filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt")))) {
			t.Errorf("%s: no CA certificates", arch)
		}
		if arch == runtime.GOARCH {
			runFromRootfs(t, rootfs, p.Args, p.Env, p.Cwd, p.User.UID, p.User.GID, version)
		}
	}
}

// runFromRootfs runs the image's binary from its unpacked root as the
// image's user: `wanda version`, then the entrypoint and command as the
// image has them, serving a file from the volume (in a namespace of its
// own: the image's server listens on [::]:1094).
func runFromRootfs(t *testing.T, rootfs string, args, env []string, cwd string, uid, gid uint32, version string) {
	t.Helper()
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Chroot: rootfs, Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	}
	v := exec.Command("/usr/bin/wanda", "version")
	v.SysProcAttr, v.Env, v.Dir = attr(), env, "/"
	out, err := v.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "wanda version "+version+"\n") {
		t.Fatalf("chroot %s wanda version: %v\n%s", rootfs, err, out)
	}
	const body = "served from the image's root\n"
	f := filepath.Join(rootfs, "var/lib/wanda/store/hello.txt")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	ns := newNetns(t)
	c := exec.Command(args[0], args[1:]...)
	c.SysProcAttr, c.Env, c.Dir = attr(), env, cwd
	p := startProcess(t, ns, c)
	if got := ns.get(t, "http://127.0.0.1:1094/store/hello.txt", 20*time.Second); got != body {
		t.Errorf("GET /store/hello.txt from the image's server: %q", got)
	}
	p.stop(t)
}

// Two builds of the same commit give the same bytes: every file of
// make packages again, into another directory, equals dist/'s.
func TestReproducible(t *testing.T) {
	dist, version := artifacts(t)
	again := t.TempDir()
	cmd := exec.Command("make", "-C", repoRoot(t), "packages", "DIST="+again, "VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make packages DIST=%s: %v\n%s", again, err, out)
	}
	names, err := filepath.Glob(filepath.Join(dist, "*"))
	if err != nil || len(names) != 7 {
		t.Fatalf("dist has %v, want 4 packages, the image, the SBOM and SHA256SUMS", names)
	}
	for _, n := range names {
		a, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(again, filepath.Base(n)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds of the same commit", filepath.Base(n))
		}
	}
	sums := exec.Command("sha256sum", "-c", "SHA256SUMS")
	sums.Dir = dist
	if out, err := sums.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
	}
	// The image's digest: the index.json of both layouts names the same.
	digest := func(dir string) string {
		x := t.TempDir()
		run(t, "tar", "-xf", filepath.Join(dir, ImageFile(version)), "-C", x, "index.json")
		return readFile(t, filepath.Join(x, "index.json"))
	}
	if digest(dist) != digest(again) {
		t.Error("the image digests differ between two builds")
	}
}

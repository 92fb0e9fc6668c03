package interop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/mount"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// Tests of `wanda mount` (docs/mount.md) with real FUSE and real tools:
// uproot, cp -r, fio, xrdcp, curl, and xrootdfs as the peer. The mount
// runs as a child process (this test binary as `wanda mount`), as a user
// runs it; it is stopped with SIGTERM and must leave no mount behind.

// requireFUSE fails in CI, and skips locally, without /dev/fuse and
// fusermount3.
func requireFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing(t, "/dev/fuse: "+err.Error())
	}
	requireTool(t, "fusermount3")
}

// fuseProc is a FUSE filesystem process (wanda mount, xrootdfs).
type fuseProc struct {
	Dir  string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
}

func (p *fuseProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *fuseProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startFUSE runs cmd (which mounts dir in the foreground), waits until
// dir is mounted, and at the test's end stops it (SIGTERM, then SIGKILL
// and a lazy unmount) and checks that nothing stays mounted.
func startFUSE(t *testing.T, dir string, cmd *exec.Cmd) *fuseProc {
	t.Helper()
	p := &fuseProc{Dir: dir, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p, p
	cmd.Env = append(cleanEnv(), testproc.ChildEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t, 20*time.Second)
		if mount.IsMountPoint(dir) {
			t.Errorf("%s still mounted after the test", dir)
			_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(cmd.Path), p.log())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for wait := time.Millisecond; !mount.IsMountPoint(dir); wait = min(2*wait, 50*time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before mounting: %v\n%s", shortArgs(cmd.Args), cmd.ProcessState, p.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not mount %s within 30s\n%s", shortArgs(cmd.Args), dir, p.log())
		}
		time.Sleep(wait)
	}
	return p
}

// stop sends SIGTERM and waits up to d for the process to end; then it
// kills it and detaches the mount. It reports whether SIGTERM sufficed.
func (p *fuseProc) stop(t *testing.T, d time.Duration) bool {
	t.Helper()
	select {
	case <-p.done:
		return true
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		t.Errorf("%s did not stop within %v of SIGTERM", shortArgs(p.cmd.Args), d)
		_ = p.cmd.Process.Kill()
		<-p.done
		_ = exec.Command("fusermount3", "-u", "-z", p.Dir).Run()
		return false
	}
}

// wandaMount runs `wanda mount URL DIR ARGS...` on a fresh directory.
func wandaMount(t *testing.T, url string, args ...string) *fuseProc {
	t.Helper()
	requireFUSE(t)
	dir := t.TempDir()
	full := append([]string{"mount", url, dir, "--cache-dir", t.TempDir(), "--stall-timeout", "5s"}, args...)
	return startFUSE(t, dir, exec.Command(os.Args[0], full...))
}

// xrootdfs mounts root URL (root://host:port//path/) with XRootD's FUSE
// client, in the foreground.
func xrootdfs(t *testing.T, url string) *fuseProc {
	t.Helper()
	requireFUSE(t)
	bin := requireTool(t, "xrootdfs")
	dir := t.TempDir()
	return startFUSE(t, dir, exec.Command(bin, dir, "-f", "-o", "rdr="+url))
}

// uproot reads the demo TTree from the mount (a local path for uproot)
// with every value checked, over HTTP and over root://.
func TestMountUproot(t *testing.T) {
	requirePython(t)
	s := startServer(t)
	for _, u := range []string{s.URL + "/store", "root://" + strings.TrimPrefix(s.URL, "http://") + "//store"} {
		t.Run(strings.SplitN(u, ":", 2)[0], func(t *testing.T) {
			m := wandaMount(t, u, "--read-only")
			sum := uprootCheck(t, filepath.Join(m.Dir, demo.RootPath), "file")
			if sum.Entries != demo.RootEntries {
				t.Errorf("entries %d, want %d", sum.Entries, demo.RootEntries)
			}
		})
	}
}

// cp -r of the demo tree out of the mount, and of a tree into it, are
// byte-identical; a file written through the mount reads back with curl
// (HTTP) and xrdcp (root://).
func TestMountCpRoundTrip(t *testing.T) {
	s := startServer(t)
	m := wandaMount(t, s.URL+"/")
	out := filepath.Join(t.TempDir(), "out")
	mustRun(t, "", "cp", "-r", filepath.Join(m.Dir, "store"), out)
	compareTrees(t, s.Store, out)

	mustRun(t, "", "cp", "-r", out, filepath.Join(m.Dir, "scratch", "in"))
	compareTrees(t, s.Store, filepath.Join(s.Scratch, "in"))

	want := randomBytes(3<<20+9, 77)
	if err := os.WriteFile(filepath.Join(m.Dir, "scratch", "w.bin"), want, 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	r := curl(t, "-sS", "-f", s.URL+"/scratch/w.bin")
	sameBytes(t, "curl of a file written through the mount", r.Body, want)
	if _, err := exec.LookPath("xrdcp"); err == nil {
		dst := filepath.Join(t.TempDir(), "x.bin")
		mustRun(t, "", "xrdcp", "-s", "root://"+strings.TrimPrefix(s.URL, "http://")+"//scratch/w.bin", dst)
		sameBytes(t, "xrdcp of a file written through the mount", readFile(t, dst), want)
	} else {
		missing(t, "xrdcp not found")
	}
}

// compareTrees checks that every file below want is below got with the
// same bytes, and that got has no other file.
func compareTrees(t *testing.T, want, got string) {
	t.Helper()
	seen := 0
	err := filepath.WalkDir(want, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		seen++
		if a, b := fileSum(t, p), fileSum(t, filepath.Join(got, rel)); a != b {
			t.Errorf("%s: differs (sha256 %x vs %x)", rel, a[:6], b[:6])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	_ = filepath.WalkDir(got, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n != seen || seen == 0 {
		t.Errorf("%s has %d files, %s %d", got, n, want, seen)
	}
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Errorf("open: %v", err)
		return [32]byte{}
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Errorf("read %s: %v", p, err)
	}
	return [32]byte(h.Sum(nil))
}

// fioJob runs fio and returns its JSON report's read bandwidth (KiB/s).
func fioJob(t *testing.T, args ...string) float64 {
	t.Helper()
	r := runFor(t, 5*time.Minute, "", "fio", append([]string{"--output-format=json"}, args...)...)
	if r.Err != nil {
		t.Fatalf("fio %s: %v\n%s\n%s", shortArgs(args), r.Err, r.Stdout, r.Stderr)
	}
	var rep struct {
		Jobs []struct {
			Error int `json:"error"`
			Read  struct {
				BW float64 `json:"bw"`
			} `json:"read"`
		} `json:"jobs"`
	}
	// fio may print notes before the JSON.
	out := r.Stdout[max(0, bytes.IndexByte(r.Stdout, '{')):]
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Jobs) == 0 {
		t.Fatalf("fio report: %v\n%s", err, r.Stdout)
	}
	for _, j := range rep.Jobs {
		if j.Error != 0 {
			t.Fatalf("fio job error %d\n%s", j.Error, r.Stdout)
		}
	}
	return rep.Jobs[0].Read.BW
}

// fio writes files with verification headers (crc32c and offset in
// every block) on the server's disk; through the mount fio reads them
// back sequentially (1 MiB blocks) and at random (64 KiB blocks), every
// block verified, cold then warm.
func TestMountFio(t *testing.T) {
	requireTool(t, "fio")
	s := startServer(t)
	const size = "64m"
	jobs := []struct{ name, rw, bs string }{{"seq", "read", "1m"}, {"rand", "randread", "64k"}}
	for _, j := range jobs {
		mustRun(t, s.Scratch, "fio", "--name="+j.name, "--filename="+j.name+".fio", "--rw=write", "--bs="+j.bs,
			"--size="+size, "--verify=crc32c", "--do_verify=0", "--ioengine=psync")
	}
	m := wandaMount(t, s.URL+"/scratch", "--read-only")
	for _, j := range jobs {
		for _, pass := range []string{"cold", "warm"} {
			bw := fioJob(t, "--name="+j.name, "--filename="+filepath.Join(m.Dir, j.name+".fio"), "--rw="+j.rw, "--bs="+j.bs,
				"--size="+size, "--verify=crc32c", "--ioengine=psync", "--readonly")
			t.Logf("fio %s %s verified through the mount (%s): %.0f MiB/s", j.rw, j.bs, pass, bw/1024)
			if bw <= 0 {
				t.Errorf("fio %s %s: no read bandwidth reported", j.name, pass)
			}
		}
	}
}

// 50 processes read one file through the mount at once; all get it.
func TestMountConcurrentReaders(t *testing.T) {
	s := startServer(t)
	const name = "shared.bin"
	if err := os.WriteFile(filepath.Join(s.Scratch, name), randomBytes(16<<20+3, 5), 0o644); err != nil {
		t.Fatal(err)
	}
	m := wandaMount(t, s.URL+"/scratch", "--read-only")
	want := fileSum(t, filepath.Join(s.Scratch, name))
	var wg sync.WaitGroup
	errs := make(chan string, 50)
	for range 50 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, "sha256sum", filepath.Join(m.Dir, name)).Output()
			if err != nil {
				errs <- err.Error()
				return
			}
			if got := strings.Fields(string(out))[0]; got != fmt.Sprintf("%x", want) {
				errs <- "sha256 " + got
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func largestFile(t *testing.T, dir string) string {
	t.Helper()
	var best string
	var size int64
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil && fi.Size() > size {
				best, size = p, fi.Size()
			}
		}
		return nil
	})
	rel, err := filepath.Rel(dir, best)
	if err != nil || size == 0 {
		t.Fatalf("no file below %s", dir)
	}
	return rel
}

// SIGTERM with a file open: `wanda mount` detaches the mount and exits 0
// in bounded time; SIGINT on an idle mount unmounts it.
func TestMountSignals(t *testing.T) {
	s := startServer(t)
	m := wandaMount(t, s.URL+"/store", "--read-only")
	f, err := os.Open(filepath.Join(m.Dir, demo.RootPath))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !m.stop(t, 20*time.Second) {
		return
	}
	t.Logf("stopped %v after SIGTERM with a file open", time.Since(start).Round(time.Millisecond))
	if code := m.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM\n%s", code, m.log())
	}
	if mount.IsMountPoint(m.Dir) {
		t.Errorf("still mounted after SIGTERM")
	}

	m2 := wandaMount(t, s.URL+"/store", "--read-only")
	if _, err := os.ReadDir(m2.Dir); err != nil {
		t.Fatal(err)
	}
	_ = m2.cmd.Process.Signal(os.Interrupt)
	select {
	case <-m2.done:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s of SIGINT")
	}
	if code := m2.cmd.ProcessState.ExitCode(); code != 0 || mount.IsMountPoint(m2.Dir) {
		t.Errorf("after SIGINT: exit %d, mounted %v\n%s", code, mount.IsMountPoint(m2.Dir), m2.log())
	}
}

// xrootdfs, XRootD's own FUSE client, mounts the same server over root://:
// both mounts list the same names and sizes and read the same bytes.
// The time of a sequential read of the largest file on each is logged.
func TestMountXrootdfsPeer(t *testing.T) {
	s := startServer(t)
	host := strings.TrimPrefix(s.URL, "http://")
	xm := xrootdfs(t, "root://"+host+"//store/")
	wm := wandaMount(t, "root://"+host+"//store", "--read-only")
	var names []string
	_ = filepath.WalkDir(s.Store, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(s.Store, p)
			names = append(names, rel)
		}
		return nil
	})
	slices.Sort(names)
	for _, m := range []*fuseProc{xm, wm} {
		for _, rel := range names {
			fi, err := os.Stat(filepath.Join(m.Dir, rel))
			want, _ := os.Stat(filepath.Join(s.Store, rel))
			if err != nil || fi.Size() != want.Size() {
				t.Errorf("%s: %s: %v (size %v, want %d)", filepath.Base(m.cmd.Path), rel, err, fi, want.Size())
			}
		}
	}
	big := largestFile(t, s.Store)
	want := fileSum(t, filepath.Join(s.Store, big))
	for _, m := range []*fuseProc{xm, wm} {
		start := time.Now()
		got := fileSum(t, filepath.Join(m.Dir, big))
		took := time.Since(start)
		fi, _ := os.Stat(filepath.Join(s.Store, big))
		t.Logf("%s: sequential read of %s (%d MiB): %v, %.0f MiB/s", filepath.Base(m.cmd.Path), big, fi.Size()>>20,
			took.Round(time.Millisecond), float64(fi.Size())/(1<<20)/took.Seconds())
		if got != want {
			t.Errorf("%s: %s differs", filepath.Base(m.cmd.Path), big)
		}
	}
	// xrootdfs creates files on wanda's root:// (it stats a file it just
	// created; the server answers for it before the upload's close).
	xw := xrootdfs(t, "root://"+host+"//scratch/")
	data := bytes.Repeat([]byte("xrootdfs wrote this\n"), 5000)
	if err := os.WriteFile(filepath.Join(xw.Dir, "from-xrootdfs.txt"), data, 0o644); err != nil {
		t.Fatalf("write through xrootdfs: %v", err)
	}
	// FUSE's release (the close on the server) is asynchronous.
	waitFor(t, 10*time.Second, "the file written through xrootdfs on the server", func() bool {
		b, err := os.ReadFile(filepath.Join(s.Scratch, "from-xrootdfs.txt"))
		return err == nil && bytes.Equal(b, data)
	})
}

// A full disk on the server: close() of a file written through the mount
// returns ENOSPC (507 over HTTP, kXR_NoSpace over root://), nothing is
// left on the server, and a file that fits goes up after.
func TestMountFullDisk(t *testing.T) {
	disk := smallDisk(t, 2<<20)
	srv := testserver.Start(t, config.Export{Prefix: "/full", Path: disk})
	for _, u := range []string{srv.URL + "/full", "root://" + srv.Addr + "//full"} {
		t.Run(strings.SplitN(u, ":", 2)[0], func(t *testing.T) {
			m := wandaMount(t, u)
			f, err := os.Create(filepath.Join(m.Dir, "big.bin"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(randomBytes(4<<20, 13)); err != nil {
				t.Fatalf("write (staged locally): %v", err)
			}
			if err := f.Close(); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("close of a file larger than the server's disk: %v, want ENOSPC", err)
			}
			if _, err := os.Stat(filepath.Join(disk, "big.bin")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused file is on the server (stat: %v)", err)
			}
			small := randomBytes(64<<10, 14)
			if err := os.WriteFile(filepath.Join(m.Dir, "small.bin"), small, 0o644); err != nil {
				t.Fatalf("a file that fits: %v", err)
			}
			sameBytes(t, "small file on the server", readFile(t, filepath.Join(disk, "small.bin")), small)
			if err := os.Remove(filepath.Join(m.Dir, "small.bin")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/mount"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// The iozone sweep on a filesystem: the same patterns with pread/pwrite
// on a file of a FUSE mount of the same server through the same path —
// `wanda mount` (in-process: the engine, the block cache, go-fuse) and
// XRootD's xrootdfs over root:// when installed. Reads are measured cold
// (a fresh mount: empty block cache, no page cache of the mount) and warm
// (the same reads again on that mount, through a new open). Writes are record by record into
// a new file, the close (the upload) included.

// fsMounter mounts base (http://host:port) on dir and returns an unmount.
type fsMounter struct {
	name  string
	mount func(ctx context.Context, base, dir, cache string) (func() error, error)
	// noCreate: creating a file failed once; writes are not tried again.
	noCreate bool
}

// ioMounters are the filesystems measured, the ones available.
func ioMounters(r *Run, which []string, block int64, prefetch int) []*fsMounter {
	var out []*fsMounter
	for _, w := range which {
		switch w {
		case "wanda":
			if _, err := os.Stat("/dev/fuse"); err != nil {
				r.Note("mount rows skipped: /dev/fuse: %v", err)
				continue
			}
			out = append(out, &fsMounter{name: "mount", mount: func(ctx context.Context, base, dir, cache string) (func() error, error) {
				return wandaMountFS(ctx, base, dir, cache, block, prefetch)
			}})
		case "xrootdfs":
			if !r.Have("xrootdfs") {
				r.Note("xrootdfs: not installed (Debian xrootd-fuse), its rows skipped")
				continue
			}
			out = append(out, &fsMounter{name: "xrootdfs", mount: xrootdfsMount})
		default:
			r.Note("mounts: unknown %q (wanda, xrootdfs)", w)
		}
	}
	return out
}

func wandaMountFS(ctx context.Context, base, dir, cache string, block int64, prefetch int) (func() error, error) {
	c := client.New()
	xt := xrdclient.New(xrdclient.Options{})
	c.Register("root", xt)
	c.Register("roots", xt)
	m, err := mount.New(mount.Options{URL: base + "/data", Dir: dir, Client: c, CacheDir: cache, CacheSize: 4 << 30,
		BlockSize: block, Prefetch: prefetch})
	if err != nil {
		return nil, err
	}
	return m.Close, nil
}

func xrootdfsMount(ctx context.Context, base, dir, _ string) (func() error, error) {
	host := strings.TrimPrefix(base, "http://")
	cmd := exec.Command("xrootdfs", dir, "-f", "-o", "rdr=root://"+host+"//data/")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() error {
		_ = exec.Command("fusermount3", "-u", dir).Run()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
		return nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for !mount.IsMountPoint(dir) {
		select {
		case <-done:
			return nil, fmt.Errorf("xrootdfs exited before mounting: %v", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			_ = stop()
			return nil, errors.New("xrootdfs did not mount within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return stop, nil
}

// ioMountSteps is the number of steps ioMount reports per mounter and path.
func ioMountSteps(records []int64) int { return 4*len(records) + 1 }

// ioMount runs the patterns on a file of a fresh mount of base (per
// record length and pattern: cold on a fresh mount, then warm).
func ioMount(ctx context.Context, r *Run, rep int, fm *fsMounter, base, path string, size int64, records []int64, maxOps int, step func(string) error) error {
	with := func(fn func(dir string) error) error {
		dir, err := os.MkdirTemp(r.Dir(), "mnt-")
		if err != nil {
			return err
		}
		cache, err := os.MkdirTemp(r.Dir(), "mcache-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(cache)
		unmount, err := fm.mount(ctx, base, dir, cache)
		if err != nil {
			return fmt.Errorf("%s: %w", fm.name, err)
		}
		ferr := fn(dir)
		if err := unmount(); err != nil && ferr == nil {
			ferr = fmt.Errorf("unmount: %w", err)
		}
		return ferr
	}
	for _, rec := range records {
		reads := ioReads(size, rec, maxOps)
		seq := reads[0].order
		ops := len(seq)
		for _, p := range reads {
			if err := step(fmt.Sprintf("rep %d %s %s %s", rep, path, p.op, client.FormatBytes(rec))); err != nil {
				return err
			}
			err := with(func(dir string) error {
				buf := make([]byte, rec)
				// Warm: the same reads through a new open, as the same job
				// run again would (wanda mount opens a file its block
				// cache holds whole in passthrough).
				for _, cache := range []string{"cold", "warm"} {
					f, err := os.Open(filepath.Join(dir, "file.bin"))
					if err != nil {
						return err
					}
					t0 := time.Now()
					for _, k := range p.order {
						if _, err := f.ReadAt(buf, k*rec); err != nil && !errors.Is(err, io.EOF) {
							f.Close()
							return fmt.Errorf("%s record %d of %d bytes: %w", p.op, k, rec, err)
						}
					}
					secs := time.Since(t0).Seconds()
					f.Close()
					r.Row("path", path, "op", p.op, "cache", cache, "record_bytes", rec,
						"mb_s", ioRound(float64(ops)*float64(rec)/1e6/secs, 3),
						"ops", ops, "bytes", int64(ops)*rec, "seconds", ioRound(secs, 4), "rep", rep)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		for _, p := range []ioRead{{"seqwrite", seq}, {"randwrite", ioPerm(int64(ops), ops, rec)}} {
			if err := step(fmt.Sprintf("rep %d %s %s %s", rep, path, p.op, client.FormatBytes(rec))); err != nil {
				return err
			}
			if fm.noCreate {
				continue
			}
			err := with(func(dir string) error {
				name := filepath.Join(dir, fmt.Sprintf("w-%s-%d.bin", p.op, rec))
				buf := make([]byte, rec)
				t0 := time.Now()
				f, err := os.Create(name)
				if err != nil {
					return errNoCreate{err}
				}
				for _, k := range p.order {
					if _, err := f.WriteAt(buf, k*rec); err != nil {
						f.Close()
						return fmt.Errorf("%s record %d: %w", p.op, k, err)
					}
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("%s close (upload): %w", p.op, err)
				}
				secs := time.Since(t0).Seconds()
				r.Row("path", path, "op", p.op, "record_bytes", rec, "mb_s", ioRound(float64(ops)*float64(rec)/1e6/secs, 3),
					"ops", ops, "bytes", int64(ops)*rec, "seconds", ioRound(secs, 4), "rep", rep)
				if err := os.Remove(name); err != nil && !errors.Is(err, syscall.ENOENT) {
					return err
				}
				return nil
			})
			var nc errNoCreate
			if errors.As(err, &nc) {
				// A filesystem that cannot create files (xrootdfs did
				// not on wanda's root:// before its server answered the
				// stat of a file being created): noted, not measured.
				r.Note("%s: cannot create a file on the mount (%v): no write rows for %s", path, nc.err, fm.name)
				fm.noCreate = true
				continue
			}
			if err != nil {
				return err
			}
		}
	}
	// The whole file as cat(1) reads it (1 MiB reads), cold: compared with
	// `wanda cp` of the same file over the same path (op cp).
	if err := step(fmt.Sprintf("rep %d %s cat", rep, path)); err != nil {
		return err
	}
	return with(func(dir string) error {
		f, err := os.Open(filepath.Join(dir, "file.bin"))
		if err != nil {
			return err
		}
		defer f.Close()
		t0 := time.Now()
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, make([]byte, 1<<20))
		if err != nil {
			return fmt.Errorf("cat: %w", err)
		}
		secs := time.Since(t0).Seconds()
		if n != size {
			return fmt.Errorf("cat read %d bytes of %d", n, size)
		}
		r.Row("path", path, "op", "cat", "cache", "cold", "record_bytes", int64(1<<20), "mb_s", ioRound(float64(n)/1e6/secs, 3),
			"ops", 1, "bytes", n, "seconds", ioRound(secs, 4), "rep", rep)
		return nil
	})
}

// errNoCreate: the filesystem refused to create the file to write.
type errNoCreate struct{ err error }

func (e errNoCreate) Error() string { return e.err.Error() }

// ioCp is `wanda cp` of the whole file to local disk over base: what the
// mount's sequential read is compared with.
func ioCp(ctx context.Context, r *Run, rep int, base, path string, size int64) error {
	c := client.New()
	defer c.HTTP.Client.CloseIdleConnections()
	dst := filepath.Join(r.Dir(), "cp-"+path+".bin")
	defer os.Remove(dst)
	t0 := time.Now()
	if _, err := c.Copy(ctx, []string{base + "/data/file.bin"}, dst, client.CopyOptions{Checksum: "none"}); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	secs := time.Since(t0).Seconds()
	r.Row("path", path, "op", "cp", "mb_s", ioRound(float64(size)/1e6/secs, 3), "ops", 1, "bytes", size,
		"seconds", ioRound(secs, 4), "rep", rep)
	return nil
}

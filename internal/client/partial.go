package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// A download goes to a hidden part file beside the destination
// (".NAME.wanda-part") and is renamed into place only when complete and
// verified. A state record beside it (".NAME.wanda-part.json") lists the
// byte ranges already written and synced, so that `cp --continue` resumes
// exactly where an interrupted run stopped.

func partPath(dst string) string {
	return filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".wanda-part")
}

func statePath(dst string) string { return partPath(dst) + ".json" }

// partState is the persisted record of a partial download. Source is the
// URL the user named; URL the server that answered (a replica, maybe).
type partState struct {
	Source string     `json:"source"`
	URL    string     `json:"url"`
	Size   int64      `json:"size"`
	ETag   string     `json:"etag,omitempty"`
	MTime  time.Time  `json:"mtime,omitzero"`
	Done   [][2]int64 `json:"done"` // [offset, length], sorted, merged
}

func loadState(dst string) (*partState, error) {
	b, err := os.ReadFile(statePath(dst))
	if err != nil {
		return nil, err
	}
	var s partState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(dst), err)
	}
	return &s, nil
}

// saveState writes the record atomically (temp file, rename).
func saveState(dst string, s *partState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := statePath(dst) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, statePath(dst))
}

func removePartial(dst string) {
	os.Remove(partPath(dst))
	os.Remove(statePath(dst))
	os.Remove(statePath(dst) + ".tmp")
}

func rangesToPairs(rs []Range) [][2]int64 {
	out := make([][2]int64, len(rs))
	for i, r := range rs {
		out[i] = [2]int64{r.Off, r.Len}
	}
	return out
}

func pairsToRanges(ps [][2]int64, size int64) ([]Range, bool) {
	out := make([]Range, 0, len(ps))
	for _, p := range ps {
		if p[0] < 0 || p[1] <= 0 || p[0]+p[1] > size || p[0]+p[1] < p[0] {
			return nil, false
		}
		out = append(out, Range{Off: p[0], Len: p[1]})
	}
	return unionRanges(out), true
}

// openPart opens (or resumes) the part file of dst and returns the ranges
// already done. info is nil when the file's size is not known yet (a
// download whose first answers tell it: the part file grows as the bytes
// arrive and is cut to size when it is known); resuming needs it.
func openPart(ctx context.Context, c *Client, src *url.URL, info *Info, dst string, resume bool) (*os.File, []Range, error) {
	pp := partPath(dst)
	f, err := os.OpenFile(pp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, &localError{err}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, nil, &localError{fmt.Errorf("%s: another copy is writing this destination (%v)", dst, err)}
	}
	var done []Range
	if resume && info != nil {
		done = c.resumable(ctx, src, info, dst, f)
	}
	if done == nil {
		// Starting over: without its record, what an older part file
		// holds counts for nothing (every byte is written again). It is
		// not truncated to 0 first: ext4 then writes the whole file out
		// when it is closed (auto_da_alloc), 0.2 s per 256 MB here.
		os.Remove(statePath(dst))
	}
	if info != nil {
		if err := f.Truncate(info.Size); err != nil {
			f.Close()
			return nil, nil, &localError{err}
		}
	}
	return f, done, nil
}

// resumeCandidate reports whether dst has something --continue could
// resume: a part file's record, or a plain shorter file.
func resumeCandidate(dst string) bool {
	if _, err := os.Stat(statePath(dst)); err == nil {
		return true
	}
	fi, err := os.Stat(dst)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}

// resumable returns the done ranges of a previous run when they belong to
// the same file (same source URL), the same version of it, and their last
// bytes still match the server's: the part file from an interrupted wanda
// cp (with its state record), or a plain shorter destination file (curl -C
// style).
func (c *Client) resumable(ctx context.Context, src *url.URL, info *Info, dst string, part *os.File) []Range {
	var done []Range
	if st, err := loadState(dst); err == nil && st.Source == src.String() && st.Size == info.Size &&
		sameVersion(Info{URL: st.URL, Size: st.Size, ETag: st.ETag, ModTime: st.MTime}, *info, mustParse(info.URL)) {
		if rs, ok := pairsToRanges(st.Done, info.Size); ok {
			done = rs
		}
	} else if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 && fi.Size() < info.Size {
		// A foreign partial destination: take it over as the part file.
		old, err := os.Open(dst)
		if err == nil {
			_, cerr := io.Copy(part, old)
			old.Close()
			if cerr == nil {
				done = []Range{{Off: 0, Len: fi.Size()}}
			}
		}
	}
	if len(done) == 0 {
		return nil
	}
	// Verify: the last bytes of every done range (up to 64 KiB each, 16
	// ranges at most) must equal the server's.
	checked := 0
	for i := len(done) - 1; i >= 0 && checked < 16; i-- {
		d := done[i]
		n := min(d.Len, 64<<10)
		off := d.Off + d.Len - n
		mine := make([]byte, n)
		if _, err := part.ReadAt(mine, off); err != nil {
			return nil
		}
		theirs := make([]byte, 0, n)
		if _, err := c.fetch(ctx, src, off, n, nil, info, func(b []byte, _ int64) error {
			theirs = append(theirs, b...)
			return nil
		}, nil, nil); err != nil {
			c.Log.Info("cannot check the partial destination against the source: starting over", "dst", dst, "err", err)
			return nil
		} else if !bytes.Equal(mine, theirs) {
			c.Log.Info("partial destination does not match the source: starting over", "dst", dst)
			return nil
		}
		checked++
	}
	return done
}

func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{}
	}
	return u
}

// startSaver persists the done ranges every two seconds, so that a killed
// run can be resumed (the page cache outlives the process; with sync the
// data is also on disk before the record claims it, for power loss). stop
// saves a last time when the transfer failed. info tells what the file
// is; nothing is saved while it is nil (no answer yet).
func startSaver(part *os.File, s *sched, src *url.URL, dst string, info func() *Info, durable bool) (stop func(failed bool)) {
	save := func() {
		in := info()
		if in == nil || (durable && part.Sync() != nil) {
			return
		}
		_ = saveState(dst, &partState{Source: src.String(), URL: in.URL, Size: in.Size, ETag: in.ETag, MTime: in.ModTime, Done: rangesToPairs(s.doneRanges())})
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				save()
			case <-quit:
				return
			}
		}
	}()
	return func(failed bool) {
		close(quit)
		wg.Wait()
		if failed {
			save()
		}
	}
}

// publish makes the finished part file the destination: rename, or link
// when the destination must not be replaced; with sync, the directory is
// synced too.
func publish(part, dst string, noReplace, sync bool) error {
	if noReplace {
		if err := os.Link(part, dst); err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s: %w", dst, ErrExist)
			}
			return &localError{err}
		}
		os.Remove(part)
	} else if err := os.Rename(part, dst); err != nil {
		return &localError{err}
	}
	if sync {
		if d, err := os.Open(filepath.Dir(dst)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// openDevice opens dst for writing in place when it is an existing
// device (/dev/null, the usual sink of a throughput test; a block
// device): a part file renamed over it would replace the device node. It
// returns nil for anything else. A destination that cannot be written at
// offsets (a pipe, a terminal) is refused with a pointer to `wanda cat`,
// as is a checksum that would have to read the bytes back (md5 or sha-256
// over several streams).
func openDevice(dst string, plan sumPlan, streams int) (*os.File, error) {
	fi, err := os.Stat(dst)
	if err != nil || fi.Mode().IsRegular() || fi.IsDir() {
		return nil, nil
	}
	if fi.Mode()&os.ModeDevice == 0 {
		return nil, &localError{fmt.Errorf("%s is not a regular file or a device (a pipe or a socket): a copy writes at offsets; use `wanda cat URL > %s`", dst, dst)}
	}
	f, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return nil, &localError{err}
	}
	if _, err := unix.Pwrite(int(f.Fd()), nil, 0); err != nil {
		f.Close()
		return nil, &localError{fmt.Errorf("%s cannot be written at offsets (%v): use `wanda cat URL > %s`", dst, err, dst)}
	}
	if streams != 1 && plan.required && !checksum.Combinable(plan.compute[0]) {
		f.Close()
		return nil, &localError{fmt.Errorf("%s is a device: a %s checksum over several streams would read the bytes back; use --checksum adler32, crc32c or none, or --streams 1", dst, plan.compute[0])}
	}
	return f, nil
}

package app

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/storage"
)

// nameDigest is a server's digest of the names it holds
// (server.federation.digest), files and directories: a walk of the
// exports, and what was written and removed through wanda since. A
// directory moved through wanda brings names nobody told: the digest is
// withdrawn (the redirectors ask this server about every name again)
// until a new walk completes.
type nameDigest struct {
	mu      sync.Mutex
	base    fed.Digest
	overlay map[uint32]int32
	walking bool
	during  []change // notices while a walk runs, replayed over its result
	gen     uint64
	ok      bool // a walk completed, and nothing untold came since
	// stale: names came that no notice told (a directory moved in) since
	// the running walk began; kick starts a walk at once.
	stale bool
	kick  chan struct{}
}

type change struct {
	fp      uint32
	present bool
}

func newNameDigest() *nameDigest {
	return &nameDigest{overlay: map[uint32]int32{}, kick: make(chan struct{}, 1)}
}

// hasLocked reports whether the digest counts path; the caller holds mu.
func (d *nameDigest) hasLocked(path string) bool {
	fp := fed.Fingerprint(path)
	return d.base.Count(fp)+int(d.overlay[fp]) > 0
}

// rewalk withdraws the digest until a walk begun from now completes.
func (d *nameDigest) rewalk() {
	d.mu.Lock()
	d.ok, d.stale = false, true
	d.gen++
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// errStale ends a walk that began before a rewalk: its result may miss
// the names that came.
var errStale = errors.New("names came during the walk that it may have missed")

// note records a name created (present) or removed; the caller holds mu.
func (d *nameDigest) noteLocked(path string, present bool) {
	fp := fed.Fingerprint(path)
	if d.walking {
		d.during = append(d.during, change{fp, present})
	}
	d.apply(fp, present)
	d.gen++
}

func (d *nameDigest) apply(fp uint32, present bool) {
	switch {
	case present:
		d.overlay[fp]++
	case d.base.Count(fp)+int(d.overlay[fp]) > 0:
		d.overlay[fp]--
	}
}

// snapshot is the digest as the redirectors take it (fed.JoinOptions.
// Digest).
func (d *nameDigest) snapshot() (fed.Digest, uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ok {
		return nil, 0, false
	}
	out := slices.Clone(d.base)
	for fp, n := range d.overlay {
		for ; n > 0; n-- {
			out = append(out, fp)
		}
		for ; n < 0; n++ {
			if i, found := slices.BinarySearch(out, fp); found {
				out = slices.Delete(out, i, i+1)
			}
		}
	}
	slices.Sort(out)
	return out, d.gen, true
}

// walk lists every export and takes the result as the new base; the
// notices of the walk's time are replayed over it.
func (d *nameDigest) walk(ctx context.Context, ns *storage.Namespace) error {
	d.mu.Lock()
	d.walking, d.during, d.stale = true, nil, false
	d.mu.Unlock()
	var fps []uint32
	var err error
	for _, e := range ns.Exports() {
		prefix := "/" + e.Prefix
		if e.Prefix == "" {
			prefix = ""
		} else {
			fps = append(fps, fed.Fingerprint(prefix)) // the export's root
		}
		if err = walkBackend(ctx, e.Backend, "", func(rel string) {
			fps = append(fps, fed.Fingerprint(prefix+"/"+rel))
		}); err != nil {
			break
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	during := d.during
	d.walking, d.during = false, nil
	if err == nil && d.stale {
		err = errStale
	}
	if err != nil {
		return err
	}
	d.base, d.overlay = fed.NewDigest(fps), map[uint32]int32{}
	for _, c := range during {
		d.apply(c.fp, c.present)
	}
	d.ok = true
	d.gen++
	return nil
}

// walkBackend calls name for every file and directory below dir
// (relative names).
func walkBackend(ctx context.Context, be storage.Backend, dir string, name func(rel string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	list, err := be.List(ctx, dir)
	if err != nil {
		if dir != "" && (errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrNotDir)) {
			return nil // gone meanwhile
		}
		return err
	}
	for _, fi := range list {
		rel := fi.Name
		if dir != "" {
			rel = dir + "/" + fi.Name
		}
		name(rel)
		if fi.IsDir {
			if err := walkBackend(ctx, be, rel, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// runDigest walks at start and every rescan until ctx ends.
func (d *nameDigest) run(ctx context.Context, ns *storage.Namespace, rescan time.Duration, log *slog.Logger) {
	for {
		select {
		case <-d.kick: // this walk answers it
		default:
		}
		start := time.Now()
		err := d.walk(ctx, ns)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errStale) {
			continue // a directory moved in meanwhile: again, at once
		}
		if err != nil {
			log.Warn("digest: walking the exports failed; the redirectors ask this server about every name until a walk succeeds", "err", err)
		} else {
			snap, _, _ := d.snapshot()
			log.Info("digest: exports walked", "names", len(snap), "took", time.Since(start).Round(time.Millisecond))
		}
		t := time.NewTimer(rescan)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-d.kick:
			t.Stop()
		}
	}
}

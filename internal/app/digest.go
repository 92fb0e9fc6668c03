package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/storage"
)

// nameDigest is a server's digest of the names it holds
// (server.federation.digest), files and directories: a walk of the
// exports, and what was written and removed through wanda since. A
// directory moved in through wanda brings names nobody told one by one:
// its tree is walked on its own, and the digest is withdrawn (the
// redirectors ask this server about every name) until that is done.
type nameDigest struct {
	mu      sync.Mutex
	base    fed.Digest
	overlay map[uint32]int32
	walking bool
	during  []change // notices while a walk runs, replayed over its result
	gen     uint64
	walked  bool // a walk of the exports completed
	// trees are the directories moved in whose names below are not
	// counted yet (logical paths, in order); kick has run walk them.
	trees []string
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

// movedIn notes a directory that came with what it holds (a rename's
// target): the digest is withdrawn until its tree is walked.
func (d *nameDigest) movedIn(path string) {
	d.mu.Lock()
	d.trees = append(d.trees, path)
	d.gen++
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

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
	if !d.walked || len(d.trees) > 0 {
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
	d.walking, d.during = true, nil
	covered := len(d.trees) // moved in before the walk: it sees them
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
	if err != nil {
		return err
	}
	d.trees = d.trees[covered:]
	d.base, d.overlay = fed.NewDigest(fps), map[uint32]int32{}
	for _, c := range during {
		d.apply(c.fp, c.present)
	}
	d.walked = true
	d.gen++
	return nil
}

// walkTrees counts the names below the directories moved in (movedIn)
// and takes them off the list; on an error they stay, the digest
// withdrawn, until the next round or the next walk of the exports. It
// runs on run's goroutine, as walk does.
func (d *nameDigest) walkTrees(ctx context.Context, ns *storage.Namespace) error {
	d.mu.Lock()
	trees := slices.Clone(d.trees)
	d.mu.Unlock()
	if len(trees) == 0 {
		return nil
	}
	var fps []uint32
	for _, t := range trees {
		e, rel, ok := ns.Resolve(strings.TrimPrefix(t, "/"))
		if !ok {
			continue
		}
		prefix := strings.TrimSuffix("/"+e.Prefix, "/")
		if err := walkBackend(ctx, e.Backend, rel, func(r string) {
			fps = append(fps, fed.Fingerprint(prefix+"/"+r))
		}); err != nil {
			return fmt.Errorf("the directory moved in at %s: %w", t, err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, fp := range fps {
		d.apply(fp, true)
	}
	d.trees = d.trees[len(trees):] // (walk runs on this goroutine too: none taken off meanwhile)
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

// run walks the exports at start and every rescan, and the trees moved
// in as they come, until ctx ends.
func (d *nameDigest) run(ctx context.Context, ns *storage.Namespace, rescan time.Duration, log *slog.Logger) {
	for {
		start := time.Now()
		err := d.walk(ctx, ns)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("digest: walking the exports failed; the redirectors ask this server about every name until a walk succeeds", "err", err)
		} else {
			snap, _, _ := d.snapshot()
			log.Info("digest: exports walked", "names", len(snap), "took", time.Since(start).Round(time.Millisecond))
		}
		next := time.NewTimer(rescan)
	wait:
		for {
			if err := d.walkTrees(ctx, ns); err != nil && ctx.Err() == nil {
				log.Warn("digest: walking a directory moved in failed; the redirectors ask this server about every name until a walk succeeds", "err", err)
			}
			select {
			case <-ctx.Done():
				next.Stop()
				return
			case <-next.C:
				break wait
			case <-d.kick:
			}
		}
	}
}

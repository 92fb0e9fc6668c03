package cache

import (
	"context"
	"slices"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// ctx is the context of work done for everyone (fetches, prefetches): it
// ends when the cache closes.
func (c *Cache) ctx() context.Context { return c.base }

// purger saves dirty records and purges above the watermarks, every
// PurgeInterval or when a write crosses the high watermark.
func (c *Cache) purger() {
	defer close(c.done)
	t := time.NewTicker(c.opts.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			c.cancel()
			return
		case <-t.C:
			c.bufs.trim()
		case <-c.kick:
		}
		c.purge()
		c.saveDirty()
	}
}

// saveDirty writes the records that changed.
func (c *Cache) saveDirty() {
	c.mu.Lock()
	es := make([]*entry, 0, len(c.entries))
	for _, e := range c.entries {
		es = append(es, e)
	}
	c.mu.Unlock()
	for _, e := range es {
		if err := e.save(); err != nil {
			c.log.Warn("cache record", "err", err)
		}
	}
}

// overHigh reports whether a purge is due: the cache above its high
// watermark, or its filesystem below min_free_disk. target is how many
// bytes the cache may keep.
func (c *Cache) overHigh() (due bool, target int64) {
	c.mu.Lock()
	used := c.used
	c.mu.Unlock()
	high := int64(c.opts.HighWatermark * float64(c.opts.MaxSize))
	low := int64(c.opts.LowWatermark * float64(c.opts.MaxSize))
	target = low
	due = used > high
	if c.opts.MinFreeDisk > 0 {
		free, total := fed.DiskSpace([]string{c.opts.Dir})
		if total > 0 && float64(free) < c.opts.MinFreeDisk*float64(total) {
			// Free what is missing, and as much again as the watermarks'
			// gap, so the purge does not run again at once.
			need := int64(c.opts.MinFreeDisk*float64(total)) - free + (high - low)
			due = true
			target = min(target, max(0, used-need))
		}
	}
	return due, target
}

// purge evicts the least recently used files, whole, until the cache is
// under its target. Files open for reading and pinned prefixes are left.
func (c *Cache) purge() {
	c.dropEmpty()
	due, target := c.overHigh()
	if !due {
		return
	}
	type cand struct {
		e  *entry
		at time.Time
	}
	c.mu.Lock()
	var cands []cand
	for _, e := range c.entries {
		e.mu.Lock()
		if e.refs == 0 && len(e.inflight) == 0 && !c.pinned(e.path) {
			cands = append(cands, cand{e, e.rec.Accessed})
		}
		e.mu.Unlock()
	}
	c.mu.Unlock()
	slices.SortFunc(cands, func(a, b cand) int { return a.at.Compare(b.at) })
	var freed int64
	var files int
	for _, k := range cands {
		c.mu.Lock()
		if c.used <= target {
			c.mu.Unlock()
			break
		}
		if c.entries[k.e.path] != k.e {
			c.mu.Unlock()
			continue
		}
		k.e.mu.Lock()
		busy := k.e.refs > 0 || len(k.e.inflight) > 0
		k.e.mu.Unlock()
		if busy {
			c.mu.Unlock()
			continue // opened since: never pulled from under a reader
		}
		delete(c.entries, k.e.path)
		n := k.e.drop()
		c.used -= n
		c.mu.Unlock()
		c.met.evictedFiles.Inc()
		c.met.evictedBytes.Add(float64(n))
		freed += n
		files++
	}
	if files > 0 {
		c.log.Info("cache purged", "files", files, "bytes", freed)
	}
}

// emptyAge is how long a file with no cached block (opened, or only
// HEAD-ed, never read) keeps its record.
const emptyAge = 10 * time.Minute

// dropEmpty forgets files that hold no block and were not used for
// emptyAge: the watermarks count bytes, so they would stay forever.
func (c *Cache) dropEmpty() {
	old := time.Now().Add(-emptyAge)
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, e := range c.entries {
		e.mu.Lock()
		idle := e.refs == 0 && len(e.inflight) == 0 && e.rec.Accessed.Before(old) && e.bytes() == 0
		e.mu.Unlock()
		if idle {
			delete(c.entries, p)
			e.drop()
		}
	}
}

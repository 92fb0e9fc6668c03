package mount

import (
	"errors"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// metaCache keeps what the server said of paths (logical, "/a/b") for a
// TTL: a stat, a listing, or "not found" (for the shorter negative TTL).
// A listing answers the lookups of its entries too, so `ls -l` of a
// directory costs one listing, not one request per entry. Changes made
// through the mount forget what they touch; changes made elsewhere show
// after the TTL.
type metaCache struct {
	ttl, negTTL time.Duration

	mu    sync.Mutex
	stats map[string]statEntry
	lists map[string]listEntry
}

type statEntry struct {
	in      client.Info
	missing bool // the server said not found
	at      time.Time
}

type listEntry struct {
	ls []client.Info
	at time.Time
}

// maxMeta bounds each map; beyond it a map starts afresh.
const maxMeta = 1 << 16

func newMetaCache(ttl, negTTL time.Duration) *metaCache {
	return &metaCache{ttl: ttl, negTTL: negTTL, stats: map[string]statEntry{}, lists: map[string]listEntry{}}
}

// errMissing is a remembered "not found".
var errMissing = client.ErrNotFound

// stat answers from a fresh stat, or from a fresh listing of the parent
// (where a name not listed is not found). ok is false when nothing fresh
// is known.
func (m *metaCache) stat(p string) (in client.Info, ok bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if e, hit := m.stats[p]; hit {
		ttl := m.ttl
		if e.missing {
			ttl = m.negTTL
		}
		if now.Sub(e.at) < ttl {
			if e.missing {
				return client.Info{}, true, errMissing
			}
			return e.in, true, nil
		}
		// Kept past its TTL for stale: the server may be down.
	}
	if p == "/" {
		return client.Info{}, false, nil
	}
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	if l, hit := m.lists[dir]; hit && now.Sub(l.at) < m.ttl {
		for _, e := range l.ls {
			if e.Name == name {
				return e, true, nil
			}
		}
		if now.Sub(l.at) < m.negTTL {
			return client.Info{}, true, errMissing
		}
	}
	return client.Info{}, false, nil
}

// putStat remembers an answer: an Info, or a not-found error. Other
// errors (a server down) are not remembered.
func (m *metaCache) putStat(p string, in client.Info, err error) {
	missing := errors.Is(err, client.ErrNotFound)
	if err != nil && !missing {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.stats) >= maxMeta {
		m.stats = map[string]statEntry{}
	}
	m.stats[p] = statEntry{in: in, missing: missing, at: time.Now()}
}

// stale is the last answer known for p, however old: what a mount shows
// while its server does not answer (the bytes already cached stay
// readable). A "not found" is not kept for this.
func (m *metaCache) stale(p string) (client.Info, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, hit := m.stats[p]; hit && !e.missing {
		return e.in, true
	}
	dir, name := path.Split(p)
	if l, hit := m.lists[path.Clean(dir)]; hit {
		for _, e := range l.ls {
			if e.Name == name {
				return e, true
			}
		}
	}
	return client.Info{}, false
}

// staleList is the last listing of p, however old.
func (m *metaCache) staleList(p string) ([]client.Info, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, hit := m.lists[p]
	return l.ls, hit
}

func (m *metaCache) list(p string) ([]client.Info, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, hit := m.lists[p]; hit && time.Since(l.at) < m.ttl {
		return l.ls, true
	}
	return nil, false
}

func (m *metaCache) putList(p string, ls []client.Info) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.lists) >= maxMeta {
		m.lists = map[string]listEntry{}
	}
	m.lists[p] = listEntry{ls: ls, at: time.Now()}
}

// forget drops what is known of p, its listing (a directory) and its
// parent's listing, after a change through the mount.
func (m *metaCache) forget(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.stats, p)
	delete(m.lists, p)
	delete(m.lists, path.Dir(p))
}

// forgetTree drops what is known below directory p (after a rename of p:
// the old paths are gone).
func (m *metaCache) forgetTree(p string) {
	prefix := p + "/"
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.stats {
		if strings.HasPrefix(k, prefix) {
			delete(m.stats, k)
		}
	}
	for k := range m.lists {
		if strings.HasPrefix(k, prefix) {
			delete(m.lists, k)
		}
	}
}

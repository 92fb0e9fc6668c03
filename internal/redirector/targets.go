package redirector

import (
	"context"
	"fmt"
	"strings"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/storage"
)

// Targets answers another front-end (root://): the members' addresses to
// send a request for path to (host:port, a member's XRootD address where
// it has one), best first — replicas for a read, writable
// members for a write. A miss everywhere is storage.ErrNotFound; members
// that did not answer in time, storage.ErrUpstreamTimeout (the client is
// told to wait and ask again); no member that may write there,
// storage.ErrReadOnly.
func (r *Redirector) Targets(ctx context.Context, path string, write bool, tried map[string]bool) ([]string, error) {
	if write {
		targets, covered := r.writeTargets(path, tried)
		if len(targets) == 0 {
			if !covered {
				return nil, fmt.Errorf("%s: no member exports it: %w", path, storage.ErrNotFound)
			}
			return nil, fmt.Errorf("%s: no writable member available: %w", path, storage.ErrReadOnly)
		}
		r.cache.forget(path)
		out := make([]string, len(targets))
		for i, t := range targets {
			out[i] = fed.HostOf(t.URL)
			if t.XRootD != "" {
				out[i] = strings.ToLower(t.XRootD)
			}
		}
		return out, nil
	}
	if hosts := r.ownerHosts(path, tried); len(hosts) > 0 {
		return hosts, nil
	}
	return r.readTargets(r.Locate(ctx, Query{Path: path, Tried: tried}), path)
}

// HolderTargets answers a root:// request that changes a file where it
// is (rm, mv, truncate, an open for update): the writable members that
// hold it, as an HTTP DELETE or MOVE is sent. A name no member holds
// (a directory, which digests do not list, or a file being created
// elsewhere) gets Targets' writable members, as before.
func (r *Redirector) HolderTargets(ctx context.Context, path string, tried map[string]bool) ([]string, error) {
	res := r.Locate(ctx, Query{Path: path, Tried: tried})
	switch res.Status {
	case fed.NotFound:
		return r.Targets(ctx, path, true, tried)
	case fed.Unavailable:
		return nil, fmt.Errorf("%s: %w: members did not answer in time", path, storage.ErrUpstreamTimeout)
	}
	r.cache.forget(path)
	var out []string
	for _, x := range writableOnly(r.order(path, res.Replicas)) {
		if h := x.RootHost(); h != "" {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: every replica is on a read-only export: %w", path, storage.ErrReadOnly)
	}
	return out, nil
}

// TargetsNow is Targets without waiting: writes as Targets, reads from
// the location cache; ok is false when a lookup is needed.
func (r *Redirector) TargetsNow(path string, write bool, tried map[string]bool) (targets []string, ok bool, err error) {
	if write {
		targets, err := r.Targets(context.Background(), path, true, tried)
		return targets, true, err
	}
	if hosts := r.ownerHosts(path, tried); len(hosts) > 0 {
		return hosts, true, nil
	}
	res := r.Locate(context.Background(), Query{Path: path, Tried: tried, CacheOnly: true})
	if !res.Cached {
		return nil, false, nil
	}
	targets, err = r.readTargets(res, path)
	return targets, true, err
}

func (r *Redirector) readTargets(res Result, path string) ([]string, error) {
	switch res.Status {
	case fed.NotFound:
		return nil, fmt.Errorf("%s: not found in the federation: %w", path, storage.ErrNotFound)
	case fed.Unavailable:
		return nil, fmt.Errorf("%s: %w: members did not answer in time", path, storage.ErrUpstreamTimeout)
	}
	var out []string
	for _, x := range r.order(path, res.Replicas) {
		if h := x.RootHost(); h != "" {
			out = append(out, h)
		}
	}
	return out, nil
}

// ownerHosts is toOwner for root:// clients (they are never a cache's
// upstream fetch: a cache reads its upstream over HTTP).
func (r *Redirector) ownerHosts(path string, tried map[string]bool) []string {
	var out []string
	for _, x := range r.toOwner(path, tried) {
		out = append(out, x.RootHost())
	}
	return out
}

package server

// Third-party copy (TPC) over root://, as XRootD does it (XrdOfsTPC*.cc on
// the servers, XrdClThirdPartyCopyJob.cc in xrdcp --tpc). The client
// (the origin) moves no data: it makes the destination pull the file
// from the source, and tells the source to let it.
//
//  1. The client opens the source with tpc.stage=placement (an ordinary
//     read: is it there, how large), and closes it.
//  2. It opens the destination for writing (kXR_new, or kXR_delete with
//     --force) with tpc.key=K (its random rendezvous key), tpc.src=SRC
//     (host:port of the source), tpc.lfn=/path at the source,
//     tpc.stage=copy and oss.asize. It asks both servers "kXR_query
//     config tpc" (a digit > 0: can do TPC).
//  3. A first kXR_sync of the destination's handle starts the copy and is
//     answered at once: the destination opens
//     root://SRC//path?tpc.key=K&tpc.org=ORG and reads. ORG names the
//     client as the destination saw it: "user.pid@host" of its login.
//     (wanda starts its pull at the next kXR_sync: see syncTPC.)
//  4. The client opens the source with tpc.key=K&tpc.dst=DSTHOST and keeps
//     that file open until the copy ends: this registers the rendezvous.
//     The source lets a later (or earlier: it waits) open that carries the
//     same key, the same path, the ORG it computes itself for the client,
//     and comes from DSTHOST, read the file — with the client's rights,
//     not the destination's. The registration lives until the client
//     closes the file, at most tpc.ttl seconds (XRootD: 7 by default, 15
//     at most), and a destination's open waits that long for it
//     (kXR_waitresp, then kXR_wait 0 to send the open again, or
//     kXR_NotAuthorized "tpc authorization expired").
//  5. A second kXR_sync of the destination's handle is answered
//     kXR_waitresp (1800 s) and, when the copy ends, kXR_attn kXR_asynresp
//     with kXR_ok or the copy's kXR_error. Meanwhile xrdcp asks kXR_stat
//     of the handle every 2.5 s for progress. Then it closes both files.
//
// A destination's kXR_close of a copy still running cancels it (XRootD's
// XrdOfsTPCJob::Del kills its xrdcp --server; the waiting kXR_sync gets
// "destination file prematurely closed"). A client that disconnects has
// its files closed by the server, so the copy is cancelled the same way.
// XRootD then leaves what was copied so far (unless ofs.tpc autorm);
// wanda leaves nothing: the Puller commits only a whole, verified file.
//
// Delegation (tpc.dlgon, TPC-lite) is not supported: "kXR_query config
// tpcdlg" answers "tpcdlg", which tells xrdcp so.
//
// This file is the source's side and what both share; tpcdst.go is the
// destination's.

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// Puller fetches the source of a third-party copy for a destination
// server (Options.TPC). src is root://SRCHOST:PORT//path?tpc.key=..&tpc.org=..
// and its query must reach the source as the opaque part of kXR_open.
// Pull stores the file as name in dst with opts (through dst.Create or a
// random upload), verifies it (checksums) and commits it: nothing may be
// visible under name unless the whole file arrived and matched. progress
// is called with the bytes copied so far. Whether src's host may be
// contacted at all is the Puller's decision; ctx ends when the copy is
// cancelled (the client closed the destination, or went away).
type Puller interface {
	Pull(ctx context.Context, src *url.URL, dst storage.Backend, name string, opts storage.CreateOptions, progress func(bytes int64)) error
}

// PullerFunc is a function that is a Puller (as tpc.Copier's PullURL:
// Options.TPC = server.PullerFunc(copier.PullURL)).
type PullerFunc func(ctx context.Context, src *url.URL, dst storage.Backend, name string, opts storage.CreateOptions, progress func(bytes int64)) error

// Pull calls f.
func (f PullerFunc) Pull(ctx context.Context, src *url.URL, dst storage.Backend, name string, opts storage.CreateOptions, progress func(bytes int64)) error {
	return f(ctx, src, dst, name, opts, progress)
}

const (
	// tpcDefaultTTL is how long a source keeps a rendezvous the client
	// registered without tpc.ttl (XRootD's ofs.tpc ttl default).
	tpcDefaultTTL = 7 * time.Second
	// maxRendezvous bounds the registrations and the destinations
	// waiting for theirs, server-wide.
	maxRendezvous = 4096
	// syncWait is the time a kXR_waitresp to the kXR_sync that waits for
	// a copy announces (XRootD's).
	syncWait = 1800
	// resolveTimeout bounds the name lookups of a rendezvous.
	resolveTimeout = 5 * time.Second
)

// rdvID names a rendezvous: the client's key, the client itself (ORG) and
// the source path, which must all match (XrdOfsTPCInfo::Match).
type rdvID struct{ key, org, lfn string }

// tpcGrant is a registered rendezvous: who may read and as whom.
type tpcGrant struct {
	id      rdvID
	dst     []netip.Addr // the destination's addresses
	dstName string       // as the client named it
	expires time.Time
	as      auth.Request // the client's credential (Op and Path set per use)
}

// rendezvous is the source's table of registrations and of destinations
// waiting for theirs. It is bounded (maxRendezvous); expired entries go
// when met or when room is needed.
type rendezvous struct {
	mu      sync.Mutex
	grants  map[rdvID]*tpcGrant
	waiters map[rdvID][]chan struct{}
	nwait   int
}

// errNoGrant: no registration matches (yet).
var errNoGrant = errors.New("no matching tpc authorization")

// add registers g, waking the destinations that wait for it.
func (rv *rendezvous) add(g *tpcGrant, now time.Time) error {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.grants == nil {
		rv.grants = map[rdvID]*tpcGrant{}
	}
	if old, ok := rv.grants[g.id]; ok && now.Before(old.expires) {
		return errorf(xrootd.CodeInvalidRequest, "Unable to open /%s; duplicate tpc authorization (key already registered)", g.id.lfn)
	}
	if len(rv.grants)+rv.nwait >= maxRendezvous {
		for id, old := range rv.grants {
			if !now.Before(old.expires) {
				delete(rv.grants, id)
			}
		}
		if len(rv.grants)+rv.nwait >= maxRendezvous {
			return errorf(xrootd.CodeOverloaded, "too many third-party copies pending (%d), try again later", maxRendezvous)
		}
	}
	rv.grants[g.id] = g
	for _, ch := range rv.waiters[g.id] {
		close(ch)
		rv.nwait--
	}
	delete(rv.waiters, g.id)
	return nil
}

// remove ends g's registration (the client closed the source file).
func (rv *rendezvous) remove(g *tpcGrant) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.grants[g.id] == g {
		delete(rv.grants, g.id)
	}
}

// claim returns the registration a destination connected from peer may
// use, errNoGrant when there is none, or a refusal. With errNoGrant and
// wait set, it also returns a channel closed when a registration for id
// arrives (the caller must call unwait if it gives up).
func (rv *rendezvous) claim(id rdvID, peer netip.Addr, now time.Time, wait bool) (*tpcGrant, chan struct{}, error) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	g, ok := rv.grants[id]
	switch {
	case ok && !now.Before(g.expires):
		delete(rv.grants, id)
		return nil, nil, errorf(xrootd.CodeNotAuthorized, "Unable to open /%s; tpc authorization expired", id.lfn)
	case ok:
		for _, a := range g.dst {
			if a == peer {
				return g, nil, nil
			}
		}
		return nil, nil, errorf(xrootd.CodeNotAuthorized, "Unable to open /%s; dest not authorized for tpc (%s is not %s, the destination the client named)", id.lfn, peer, g.dstName)
	case !wait:
		return nil, nil, errNoGrant
	}
	if len(rv.grants)+rv.nwait >= maxRendezvous {
		return nil, nil, errorf(xrootd.CodeOverloaded, "too many third-party copies pending (%d), try again later", maxRendezvous)
	}
	if rv.waiters == nil {
		rv.waiters = map[rdvID][]chan struct{}{}
	}
	ch := make(chan struct{})
	rv.waiters[id] = append(rv.waiters[id], ch)
	rv.nwait++
	return nil, ch, errNoGrant
}

// unwait forgets a waiter that gave up (if add did not take it already).
func (rv *rendezvous) unwait(id rdvID, ch chan struct{}) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	ws := rv.waiters[id]
	for i, w := range ws {
		if w == ch {
			rv.waiters[id] = append(ws[:i], ws[i+1:]...)
			rv.nwait--
			break
		}
	}
	if len(rv.waiters[id]) == 0 {
		delete(rv.waiters, id)
	}
}

// openSource answers an open for reading that carries tpc.key: the
// client registering a rendezvous (tpc.dst), or a destination server
// coming to read (tpc.org).
func (ss *session) openSource(ctx context.Context, r *request, o xrootd.OpenRequest, t target, key string) error {
	org, dst := cgiValue(t.cgi, "tpc.org"), cgiValue(t.cgi, "tpc.dst")
	switch {
	case dst != "" && org == "":
		return ss.registerTPC(ctx, r, o, t, key, dst)
	case org != "" && dst == "":
		return ss.claimTPC(ctx, r, o, t, rdvID{key: key, org: org, lfn: t.logical})
	}
	return errorf(xrootd.CodeArgInvalid, "Unable to open %s; conflicting tpc cgi (tpc.key needs one of tpc.dst and tpc.org)", t.Path())
}

// registerTPC is the client's open of the source (step 4): it must be
// allowed to read the file itself; the registration lives while the file
// stays open, at most the TTL.
func (ss *session) registerTPC(ctx context.Context, r *request, o xrootd.OpenRequest, t target, key, dst string) error {
	if err := ss.authorize(ctx, auth.Read, t); err != nil {
		return err
	}
	if !t.found {
		return errNoExport(t)
	}
	addrs, err := resolveHost(ctx, dst)
	if err != nil {
		return errorf(xrootd.CodeArgInvalid, "Unable to open %s; tpc destination %q: %v", t.Path(), dst, err)
	}
	now := time.Now()
	g := &tpcGrant{
		id: rdvID{key: key, org: ss.org(ctx), lfn: t.logical}, dst: addrs, dstName: dst,
		expires: now.Add(ss.tpcTTL(t.cgi)),
		as:      auth.Request{Peer: ss.main.peer, Subject: ss.Subject(), Bearer: ss.Bearer()},
	}
	// The file is opened before the registration: a destination must
	// not be let in to a file the client could not open.
	return ss.openRead(ctx, r, o, t, func() error {
		return ss.srv.rdv.add(g, now)
	}, func() { ss.srv.rdv.remove(g) })
}

// tpcTTL is the registration's lifetime: tpc.ttl seconds if given,
// bounded by Options.TPCWait.
func (ss *session) tpcTTL(cgi string) time.Duration {
	ttl := min(tpcDefaultTTL, ss.srv.opts.TPCWait)
	if v := cgiValue(cgi, "tpc.ttl"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			ttl = min(time.Duration(n)*time.Second, ss.srv.opts.TPCWait)
		}
	}
	return ttl
}

// claimTPC is a destination server's open of the source (step 3): it is
// let in when the client registered the same key for the same path, and
// it connects from the address the client named; the file is then read
// with the client's rights. Without a registration yet, the open waits
// for one (kXR_waitresp) up to TPCWait, as XRootD's does.
func (ss *session) claimTPC(ctx context.Context, r *request, o xrootd.OpenRequest, t target, id rdvID) error {
	rv := &ss.srv.rdv
	g, ch, err := rv.claim(id, peerAddr(r.c.peer), time.Now(), true)
	if err == nil {
		return ss.openClaimed(ctx, r, o, t, g)
	}
	if !errors.Is(err, errNoGrant) {
		ss.srv.log.Info("tpc open refused", "path", t.Path(), "peer", ss.main.peer, "err", err)
		return err
	}
	wait := ss.srv.opts.TPCWait
	err = r.later(ctx, int(wait/time.Second), func(ctx context.Context) ([]byte, error) {
		defer rv.unwait(id, ch)
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-ch:
			// Registered: the client sends the open again, which
			// then finds it (XRootD answers so, it cannot attach a
			// file to the client from a callback).
			return nil, errAgain
		case <-timer.C:
			ss.srv.log.Info("tpc open refused", "path", t.Path(), "peer", ss.main.peer, "err", "no registration came")
			return nil, errorf(xrootd.CodeNotAuthorized, "Unable to open %s; tpc authorization expired", t.Path())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	if err != nil && err != errSent { // errSent itself: the callback runs; wrapped (c.broken): it does not
		// The kXR_waitresp could not be sent (the connection is gone):
		// the callback never runs, so the waiter is dropped here, or
		// it would hold a place in the table for good.
		rv.unwait(id, ch)
	}
	return err
}

// openClaimed opens the source file for a destination under the client's
// credential.
func (ss *session) openClaimed(ctx context.Context, r *request, o xrootd.OpenRequest, t target, g *tpcGrant) error {
	as := g.as
	as.Op, as.Path = auth.Read, t.Path()
	if err := ss.srv.opts.Auth.Authorize(ctx, as); err != nil {
		return err
	}
	if !t.found {
		return errNoExport(t)
	}
	ss.srv.log.Debug("tpc access granted", "path", t.Path(), "destination", ss.main.peer, "origin", g.id.org)
	return ss.openRead(ctx, r, o, t, nil, nil)
}

// org names the client as XRootD's tident does for TPC
// (XrdOfsTPC::genOrg): "user.pid@host", host being the name its address
// resolves to (its address when it resolves to none).
func (ss *session) org(ctx context.Context) string {
	ss.orgOnce.Do(func() {
		ss.orgName = ss.user + "." + strconv.Itoa(int(ss.pid)) + "@" + hostName(ctx, hostOf(ss.main.peer))
	})
	return ss.orgName
}

// hostName is the first name ip resolves to, without its final dot, or
// ip itself.
func hostName(ctx context.Context, ip string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resolveTimeout)
	defer cancel()
	if names, err := net.DefaultResolver.LookupAddr(ctx, ip); err == nil && len(names) > 0 && names[0] != "" {
		return strings.TrimSuffix(names[0], ".")
	}
	if a, err := netip.ParseAddr(ip); err == nil {
		return a.Unmap().String()
	}
	return ip
}

// resolveHost returns the addresses of a host name or address
// ("[::ffff:127.0.0.1]" as xrdcp writes it), IPv4-mapped ones unmapped.
func resolveHost(ctx context.Context, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	if host == "" || strings.ContainsAny(host, "/?#@:[] ") {
		return nil, errors.New("not a host name")
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for i := range as {
		as[i] = as[i].Unmap()
	}
	return as, nil
}

// peerAddr is the address of a host:port, unmapped.
func peerAddr(hostport string) netip.Addr {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// errAgain, from a deferred answer: tell the client to send its request
// again now (kXR_wait 0).
var errAgain = errors.New("send the request again")

// later answers r after a kXR_waitresp of secs seconds: fn runs on its
// own goroutine (counted in the connection's, so that it ends with it)
// and its result goes out as kXR_attn kXR_asynresp — kXR_ok with its
// body, kXR_wait 0 for errAgain, else kXR_error. Nothing is sent when
// the connection ended meanwhile.
func (r *request) later(ctx context.Context, secs int, fn func(ctx context.Context) ([]byte, error)) error {
	if err := r.out.send(r.hdr.StreamID, xrootd.StatusWaitResp, xrootd.WaitResponse{Seconds: int32(secs)}.Append(nil)); err != nil {
		return err
	}
	c, out, sid, id := r.c, r.out, r.hdr.StreamID, r.hdr.RequestID
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		body, err := fn(ctx)
		st := xrootd.StatusOK
		switch {
		case errors.Is(err, errAgain):
			st, body = xrootd.StatusWait, xrootd.WaitResponse{}.Append(nil)
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			code, msg := codeOf(err)
			if code == xrootd.CodeServerError {
				c.srv.log.Warn("request failed", "request", id.String(), "peer", c.peer, "err", err)
			}
			st, body = xrootd.StatusError, xrootd.ErrorResponse{Code: code, Msg: msg}.Append(nil)
		}
		_ = out.sendAsync(sid, st, body)
	}()
	return errSent
}

// sendAsync sends a deferred answer: kXR_attn kXR_asynresp carrying the
// answer's own header (with its stream ID) and body.
func (c *conn) sendAsync(sid xrootd.StreamID, st xrootd.Status, body []byte) error {
	frame := xrootd.ResponseHeader{Status: xrootd.StatusAttn, Dlen: int32(8 + xrootd.ResponseHeaderLen + len(body))}.Append(nil)
	frame = append(frame, byte(xrootd.AttnAsyncResp>>24), byte(xrootd.AttnAsyncResp>>16), byte(xrootd.AttnAsyncResp>>8), byte(xrootd.AttnAsyncResp&0xff), 0, 0, 0, 0)
	frame = xrootd.ResponseHeader{StreamID: sid, Status: st, Dlen: int32(len(body))}.Append(frame)
	return c.sendRaw(frame, body)
}

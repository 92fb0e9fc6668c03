package app

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/fed/cmsd"
	"github.com/wanda-fed/wanda/internal/redirector"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// upstreams are a member's parent links, of every protocol; notices go
// to all of them. Set once parents are joined; nil before.
type upstreams struct {
	p atomic.Pointer[[]fed.Upstream]
	// digest, when set (server.federation.digest), follows every notice
	// before the parents hear of it (digest.go).
	digest *nameDigest
}

func (u *upstreams) set(list []fed.Upstream) { u.p.Store(&list) }

func (u *upstreams) all() []fed.Upstream {
	if p := u.p.Load(); p != nil {
		return *p
	}
	return nil
}

// notify tells every parent that a file appeared or went; the digest
// takes it first, under its lock, so that a digest read after a notice's
// number includes it.
func (u *upstreams) notify(path string, present bool) {
	if d := u.digest; d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.noteLocked(path, present)
	}
	u.tell(path, present)
}

func (u *upstreams) tell(path string, present bool) {
	for _, x := range u.all() {
		x.Notify(path, present)
	}
}

// notifyNames is notify with a digest, which counts directories too:
// the directories an appearance made (an upload's parents, a mkdir -p's)
// are told first, and a directory is counted once.
func (u *upstreams) notifyNames(base, path string, c posix.Change) {
	d := u.digest
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.Present {
		var made []string
		for dir := storage.Dir(path); len(dir) > len(base) && !d.hasLocked(dir); dir = storage.Dir(dir) {
			made = append(made, dir)
		}
		for _, dir := range slices.Backward(made) {
			d.noteLocked(dir, true)
			u.tell(dir, true)
		}
		if c.Dir && d.hasLocked(path) {
			return
		}
	}
	d.noteLocked(path, c.Present)
	u.tell(path, c.Present)
}

// stop leaves every parent, in parallel, bounded by ctx.
func (u *upstreams) stop(ctx context.Context) {
	done := make(chan struct{})
	list := u.all()
	go func() {
		defer close(done)
		for _, x := range list {
			x.Stop(ctx)
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// onChange turns a backend's change of a name under prefix into a
// notice for the parents (fed.Upstream.Notify). Without a digest, a
// directory's appearance is not told (XRootD's data servers tell files).
// With one, a directory that came with what it holds (moved in) has its
// tree walked for the digest: its names below were not told.
func (u *upstreams) onChange(prefix string) func(posix.Change) {
	base := "/" + strings.Trim(prefix, "/")
	return func(c posix.Change) {
		p := base + "/" + c.Name
		if base == "/" {
			p = "/" + c.Name
		}
		if u.digest == nil {
			if !c.Dir {
				u.notify(p, c.Present)
			}
			return
		}
		u.notifyNames(base, p, c)
		if c.Tree && c.Present {
			u.digest.movedIn(p)
		}
	}
}

// joinServer starts the server's parent links: one Joiner for the wanda
// redirectors, one cmsd Uplink per XRootD manager.
func (s *Server) joinServer() {
	httpParents, managers := config.SplitJoin(s.fedCfg.Join)
	var list []fed.Upstream
	if len(httpParents) > 0 {
		jo := fed.JoinOptions{
			Parents: httpParents, Interval: s.fedCfg.Heartbeat, Token: s.fedCfg.Token,
			Self: s.self, Log: s.log,
		}
		if s.ups.digest != nil {
			jo.Digest = s.ups.digest.snapshot
		}
		s.joiner = fed.StartJoiner(jo)
		list = append(list, s.joiner)
	}
	for _, m := range managers {
		list = append(list, cmsd.StartUplink(cmsd.UplinkOptions{
			Manager: m, Self: s.self,
			Locate: func(ctx context.Context, p string) bool {
				return s.local.Locate(ctx, p).Status == fed.Found
			},
			Forward:   s.forward,
			Suspended: s.drained,
			Interval:  s.fedCfg.Heartbeat,
			Log:       s.log,
		}))
	}
	s.ups.set(list)
}

// drained reports a drain by an admin of any wanda redirector this
// server joined: an XRootD manager is told (cmsd's suspend).
func (s *Server) drained() bool {
	if s.joiner == nil {
		return false
	}
	for _, p := range s.joiner.Status() {
		if p.Drained {
			return true
		}
	}
	return false
}

// forward runs a namespace operation an XRootD manager forwards (its
// clients' rm, mv, mkdir, ... at the redirector, `ofs.forward`), as an
// XRootD data server does: on writable exports only.
func (s *Server) forward(ctx context.Context, op cms.Forward) error {
	be, rel, err := s.resolveWritable(op.Path)
	if err != nil {
		return err
	}
	switch op.Code {
	case cms.CodeRm:
		if fi, err := be.Stat(ctx, rel); err == nil && fi.IsDir {
			return fmt.Errorf("%s is a directory: %w", op.Path, storage.ErrIsDir)
		}
		return be.Remove(ctx, rel)
	case cms.CodeRmdir:
		fi, err := be.Stat(ctx, rel)
		if err != nil {
			return err
		}
		if !fi.IsDir {
			return fmt.Errorf("%s is not a directory: %w", op.Path, storage.ErrNotDir)
		}
		return be.Remove(ctx, rel)
	case cms.CodeMkdir, cms.CodeMkpath:
		return be.Mkdir(ctx, rel, op.Code == cms.CodeMkpath)
	case cms.CodeMv:
		be2, rel2, err := s.resolveWritable(op.Path2)
		if err != nil {
			return err
		}
		if be2 != be {
			return fmt.Errorf("%s and %s are in different exports: %w", op.Path, op.Path2, storage.ErrPermission)
		}
		return be.Rename(ctx, rel, rel2, true)
	case cms.CodeTrunc:
		size, err := strconv.ParseInt(op.Mode, 10, 64)
		if err != nil || size < 0 {
			return fmt.Errorf("trunc: bad size %q", op.Mode)
		}
		up, ok := be.(storage.Updater)
		if !ok {
			return fmt.Errorf("trunc: this export cannot change files in place: %w", storage.ErrPermission)
		}
		fu, err := up.Update(ctx, rel)
		if err != nil {
			return err
		}
		if err := fu.Truncate(size); err != nil {
			fu.Abort()
			return err
		}
		_, err = fu.Commit(ctx)
		return err
	case cms.CodeChmod:
		mode, err := strconv.ParseUint(op.Mode, 8, 32)
		if err != nil || mode > 0o777 {
			return fmt.Errorf("chmod: bad mode %q", op.Mode)
		}
		ch, ok := be.(storage.Chmoder)
		if !ok {
			return fmt.Errorf("chmod: this export has no permission bits: %w", storage.ErrPermission)
		}
		return ch.Chmod(ctx, rel, fs.FileMode(mode))
	}
	return fmt.Errorf("%s is not a namespace operation", cms.CodeName(op.Code))
}

// resolveWritable finds the backend of a logical path in a writable
// export.
func (s *Server) resolveWritable(logical string) (storage.Backend, string, error) {
	p, err := fed.CleanLogical(logical)
	if err != nil {
		return nil, "", err
	}
	e, rel, ok := s.ns.Resolve(p[1:])
	if !ok || rel == "" {
		return nil, "", fmt.Errorf("%s: not in an export: %w", logical, storage.ErrNotFound)
	}
	if s.readOnly[e.Prefix] {
		return nil, "", fmt.Errorf("%s: the export is read-only: %w", logical, storage.ErrReadOnly)
	}
	return e.Backend, rel, nil
}

// startCmsd starts the redirector's cmsd parts: a login to each XRootD
// manager in join, and the listener for XRootD members (cmsd_listen).
// It returns a function that waits for the listener to end (after ctx).
func (r *Redirector) startCmsd(ctx context.Context, rd *redirector.Redirector, xc *xrdclient.Transport) (wait func(), err error) {
	c := r.cfg
	_, managers := config.SplitJoin(c.Join)
	cluster := c.CmsdCluster
	if cluster == "" {
		cluster = rd.ID()
	}
	for _, m := range managers {
		rd.AddUpstream(cmsd.StartUplink(cmsd.UplinkOptions{
			Manager: m, Redirector: true, Self: rd.Self, Locate: rd.Has, LocateTimeout: c.LookupTimeout,
			Suspended: rd.Suspended, Interval: c.Heartbeat, ClusterID: cluster, Log: r.log,
		}))
	}
	if c.CmsdListen == "" {
		return func() {}, nil
	}
	allow, err := config.ParseAllow(c.CmsdAllow)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	l, err := cmsd.NewListener(cmsd.ListenerOptions{
		Cluster: rd, Allow: allow, Ping: c.Heartbeat, MissLimit: c.MissLimit, Wait: c.CmsdWait,
		Stat: func(ctx context.Context, addr, path string) (int64, time.Time, bool, error) {
			return probeRoot(ctx, xc, "root://"+addr+"/"+(&url.URL{Path: path}).EscapedPath())
		},
		HTTP: probeHTTP,
		SID:  "m-wanda@" + host + " " + strings.ReplaceAll(cluster, " ", "_"),
		Site: c.Labels["site"], Log: r.log,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.CmsdListen)
	if err != nil {
		return nil, fmt.Errorf("redirector.cmsd_listen: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := l.Serve(ctx, ln); err != nil {
			r.log.Error("cmsd listener stopped", "err", err)
		}
	}()
	r.cmsdAddr.Store(ptr(ln.Addr().String()))
	return func() { <-done }, nil
}

func ptr[T any](v T) *T { return &v }

// probeHTTP tells whether an HTTP server (XrdHttp) answers on addr, on
// the same port as root:// (XRootD tells them apart by the first bytes).
func probeHTTP(ctx context.Context, addr string) string {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return ""
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(c, "HEAD / HTTP/1.0\r\nHost: %s\r\nUser-Agent: wanda-probe\r\n\r\n", addr); err != nil {
		return ""
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.") {
		return ""
	}
	return "http"
}

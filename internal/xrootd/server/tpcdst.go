package server

// The destination's side of a third-party copy (see tpc.go): an open for
// writing with tpc.key and tpc.src makes nothing (the file appears only
// when the Puller commits it whole); the second kXR_sync starts the pull
// and waits for its end (syncTPC says why not the first); kXR_stat of the handle tells the bytes
// copied so far; kXR_close cancels a pull still running.

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// tpcJob is a copy this server pulls, from the open to the close of its
// handle.
type tpcJob struct {
	srv   *Server
	src   *url.URL
	be    storage.Backend
	name  string // in be
	path  string // logical, for messages
	opts  storage.CreateOptions
	bytes atomic.Int64 // copied so far

	mu        sync.Mutex
	armed     bool // a first kXR_sync came, and holds a pull slot
	started   bool
	closed    bool
	cancelled bool // by the client (close, ofs.tpc cancel)
	cancel    context.CancelFunc
	done      chan struct{} // closed when the pull ended; err is then set
	err       error
}

// isTPC reports whether an open's path asks for a third-party copy.
func isTPC(raw string) bool {
	_, cgi := xrootd.SplitCGI(raw)
	return cgiValue(cgi, "tpc.key") != ""
}

// openDest answers the client's open of the destination (step 2 of
// tpc.go). It needs the rights of an ordinary write (the caller asked the
// Authorizer: createOnly is set when the credential may only create).
func (ss *session) openDest(ctx context.Context, r *request, o xrootd.OpenRequest, t target, createOnly error) error {
	create, replace := o.Options&xrootd.OpenNew != 0, o.Options&xrootd.OpenDelete != 0
	if !create && !replace {
		return errorf(xrootd.CodeArgInvalid, "Unable to open %s; a tpc destination is opened with kXR_new or kXR_delete", t.Path())
	}
	noReplace := !replace || createOnly != nil
	src, err := tpcSourceURL(t, ss.org(ctx))
	if err != nil {
		return err
	}
	be := t.export.Backend
	if fi, err := be.Stat(ctx, t.rel); err == nil {
		switch {
		case fi.IsDir:
			return errorf(xrootd.CodeIsDirectory, "%s is a directory", t.Path())
		case noReplace && createOnly != nil && replace:
			return createOnly
		case noReplace:
			return errorf(xrootd.CodeItExists, "%s exists (open with kXR_delete to replace it)", t.Path())
		}
	}
	job := &tpcJob{
		srv: ss.srv, src: src, be: be, name: t.rel, path: t.Path(),
		opts: storage.CreateOptions{NoReplace: noReplace, MakeParents: o.Options&(xrootd.OpenMkpath|xrootd.OpenAsync) != 0, Size: announcedSize(t.cgi)},
	}
	of := &openFile{logical: t.logical, export: t.export, rel: t.rel, tpc: job,
		info: storage.FileInfo{Name: storage.Base(t.rel), Path: t.rel, ModTime: time.Now(), Mode: 0o644}}
	h, err := ss.add(ctx, of)
	if err != nil {
		return err
	}
	ss.srv.log.Debug("tpc destination opened", "path", t.Path(), "source", redactKey(src.String()), "peer", ss.main.peer)
	resp := xrootd.OpenResponse{Handle: h}
	if o.Options&xrootd.OpenRetstat != 0 || o.OptionsT&xrootd.OpenRetstatx != 0 {
		resp.Stat = ss.statInfo(of.stat()).String()
	}
	return r.ok(resp.Append(nil))
}

// tpcSourceURL is what the destination reads (XrdOfsTPC::Validate):
// root://SRC//LFN?<tpc.scgi>&tpc.key=K&tpc.org=ORG, roots:// when the
// client said the source speaks it (tpc.spr).
func tpcSourceURL(t target, org string) (*url.URL, error) {
	src := cgiValue(t.cgi, "tpc.src")
	if src == "" {
		return nil, errorf(xrootd.CodeArgInvalid, "Unable to open %s; tpc source not specified", t.Path())
	}
	hu, err := url.Parse("root://" + src)
	if err != nil || hu.Hostname() == "" || hu.Path != "" || hu.RawQuery != "" || hu.Fragment != "" {
		return nil, errorf(xrootd.CodeArgInvalid, "Unable to open %s; invalid tpc source %q", t.Path(), src)
	}
	lfn := cgiValue(t.cgi, "tpc.lfn")
	switch {
	case lfn == "":
		lfn = t.Path()
	case !strings.HasPrefix(lfn, "/"):
		return nil, errorf(xrootd.CodeArgInvalid, "Unable to open %s; source lfn not absolute", t.Path())
	}
	if _, err := storage.CleanPath(lfn); err != nil {
		return nil, errorf(xrootd.CodeArgInvalid, "Unable to open %s; invalid source lfn: %v", t.Path(), err)
	}
	key := cgiValue(t.cgi, "tpc.key")
	if strings.ContainsAny(key, "&# \t") {
		return nil, errorf(xrootd.CodeArgInvalid, "Unable to open %s; invalid tpc.key", t.Path())
	}
	scheme := "root"
	if spr := cgiValue(t.cgi, "tpc.spr"); spr == "roots" || spr == "xroots" {
		scheme = "roots"
	}
	q := sourceCGI(cgiValue(t.cgi, "tpc.scgi"))
	if q != "" {
		q += "&"
	}
	q += "tpc.key=" + key + "&tpc.org=" + org
	return &url.URL{Scheme: scheme, User: hu.User, Host: hu.Host, Path: "/" + lfn, RawQuery: q}, nil
}

// sourceCGI keeps of the client's tab-separated source opaque (tpc.scgi)
// what is not TPC's or the client's own (XrdOucTPC::copyCGI).
func sourceCGI(scgi string) string {
	var out []string
	for _, kv := range strings.Split(scgi, "\t") {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "tpc.") || strings.HasPrefix(k, "xrd.") || strings.HasPrefix(k, "xrdcl.") || strings.ContainsAny(kv, "&#") {
			continue
		}
		out = append(out, kv)
	}
	return strings.Join(out, "&")
}

// redactKey hides the rendezvous key in a URL or message for logs and
// answers.
func redactKey(s string) string {
	i := strings.Index(s, "tpc.key=")
	if i < 0 {
		return s
	}
	j := i + len("tpc.key=")
	k := j
	for k < len(s) && s[k] != '&' && s[k] != ' ' && s[k] != '"' {
		k++
	}
	return s[:j] + "REDACTED" + redactKey(s[k:])
}

// syncTPC answers kXR_sync of a copy's handle. The first is answered at
// once; the next starts the pull and is answered when it ends
// (kXR_waitresp, then kXR_asynresp).
//
// XRootD starts its copy at the first kXR_sync, before the client
// registered the rendezvous at the source (that is what the client does
// between the two); its xrdcp --server opens the source once, and
// waits there for the registration. A puller that opens the source
// several times at once (tpc.Copier's streams) would meet XRootD's
// "duplicate tpc auth request" (two destinations waiting with one key
// are taken for an attack). Started at the second kXR_sync, the pull
// finds the registration made: xrdcp and ThirdPartyCopy send both.
func (ss *session) syncTPC(ctx context.Context, r *request, j *tpcJob) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return errorf(xrootd.CodeFileNotOpen, "%s is closed", j.path)
	}
	if !j.armed {
		j.mu.Unlock()
		// The first sync takes one of MaxPulls slots, before the client
		// registers at the source (as XRootD queues its jobs there): a
		// copy that waits, waits here, not with its registration
		// running out at the source.
		select {
		case j.srv.pulls <- struct{}{}:
			return j.arm(r)
		default:
		}
		return r.later(ctx, syncWait, func(ctx context.Context) ([]byte, error) {
			select {
			case j.srv.pulls <- struct{}{}:
				return nil, j.arm(nil)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	}
	if !j.started {
		j.start(ss.ctx)
	}
	done := j.done
	j.mu.Unlock()
	select {
	case <-done:
		if err := j.result(); err != nil {
			return err
		}
		return r.ok()
	default:
	}
	return r.later(ctx, syncWait, func(ctx context.Context) ([]byte, error) {
		select {
		case <-done:
			return nil, j.result()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

// arm records the pull slot just taken (answering r when not nil); a
// job closed meanwhile gives it back.
func (j *tpcJob) arm(r *request) error {
	j.mu.Lock()
	if j.closed || j.armed {
		j.mu.Unlock()
		<-j.srv.pulls
		return errorf(xrootd.CodeFileNotOpen, "%s is closed", j.path)
	}
	j.armed = true
	j.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.ok()
}

// start runs the pull on its own goroutine, under the session's context:
// it ends with the session. j.mu is held.
func (j *tpcJob) start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	j.started, j.cancel, j.done = true, cancel, make(chan struct{})
	j.srv.log.Info("tpc pull started", "path", j.path, "source", redactKey(j.src.String()))
	go j.run(ctx)
}

func (j *tpcJob) run(ctx context.Context) {
	defer close(j.done)
	start := time.Now()
	err := j.srv.opts.TPC.Pull(ctx, j.src, j.be, j.name, j.opts, func(n int64) { j.bytes.Store(n) })
	<-j.srv.pulls // the first sync's slot
	j.mu.Lock()
	j.err = err
	j.mu.Unlock()
	if err != nil {
		j.srv.log.Info("tpc pull failed", "path", j.path, "source", redactKey(j.src.String()), "err", redactKey(err.Error()))
		return
	}
	j.srv.log.Info("tpc pull done", "path", j.path, "bytes", j.bytes.Load(), "took", time.Since(start))
}

// result is the answer for a pull that ended.
func (j *tpcJob) result() error {
	j.mu.Lock()
	err, cancelled := j.err, j.cancelled
	j.mu.Unlock()
	switch {
	case err == nil:
		return nil
	case cancelled:
		return errorf(xrootd.CodeCancelled, "Unable to copy %s; destination file prematurely closed or copy cancelled: nothing stored", j.path)
	}
	code, msg := codeOf(err)
	if code == xrootd.CodeServerError || code == xrootd.CodeCancelled {
		msg = err.Error() // a failed copy says why (the source's answer...)
	}
	return &Error{Code: code, Msg: "Unable to copy " + j.path + "; " + redactKey(msg) + "; nothing stored", Err: err}
}

// stop cancels a pull still running (ofs.tpc cancel); it reports
// whether there was one.
func (j *tpcJob) stop() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.started {
		return false
	}
	select {
	case <-j.done:
		return false
	default:
	}
	j.cancelled = true
	j.cancel()
	return true
}

// close ends the job at kXR_close (or at the session's end): a pull
// still running is cancelled and waited for. The answer says whether the
// file was stored.
func (j *tpcJob) close(abort bool) error {
	j.mu.Lock()
	j.closed = true
	started, armed := j.started, j.armed
	j.mu.Unlock()
	if !started {
		if armed {
			<-j.srv.pulls // armed, never started: the slot goes back
		}
		return nil // nothing was asked to be copied
	}
	j.stop()
	<-j.done
	j.cancel()
	if abort {
		return nil
	}
	return j.result()
}

// fcntl answers kXR_query kXR_Qopaqug of a handle: "ofs.tpc cancel" of a
// copy, the one XRootD knows (xrdcp sends it when its copy is
// interrupted).
func (ss *session) fcntl(r *request, h xrootd.Handle) error {
	if arg := string(trimNUL(r.data)); arg != "ofs.tpc cancel" {
		return errorf(xrootd.CodeUnsupported, "fcntl %q is not supported", arg)
	}
	f, err := ss.acquire(h)
	if err != nil {
		return err
	}
	f.refs.Done()
	if f.tpc == nil || !f.tpc.stop() {
		return errorf(xrootd.CodeNotFound, "tpc operation not found")
	}
	return r.ok()
}

// errNoPuller: this server cannot be a copy's destination.
func errNoPuller(t target) error {
	// "tpc not supported" is what xrdcp looks for to say "Destination
	// does not support third-party-copy".
	return errorf(xrootd.CodeUnsupported, "Unable to open %s; tpc not supported (this server pulls no third-party copies)", t.Path())
}

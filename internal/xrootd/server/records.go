package server

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// A root:// access is a file handle's life, open to close: started at
// kXR_open (a failed open is a record of its own), ended at kXR_close or
// when the session ends with the file open. Reads, vector reads and
// writes are counted on the handle's Access (atomic: a session's
// connections share it).

// startOpen starts the record of a kXR_open and returns ctx carrying it
// (for the identity the policy verifies, and for add to hand the file).
func (ss *session) startOpen(ctx context.Context, r *request, op string, start time.Time) (context.Context, *monitor.Access) {
	sink := ss.srv.opts.Records
	if sink == nil {
		return ctx, nil
	}
	raw := string(trimNUL(r.data))
	acc := sink.Start(monitor.Begin{Protocol: ss.protocolName(), Op: op, Path: raw, Client: ss.main.peer, Start: start, Session: ss.mon})
	if _, cgi, ok := strings.Cut(raw, "?"); ok {
		acc.SetChain(chainOf(cgi))
	}
	return monitor.NewContext(auth.WithIdentitySink(ctx, acc), acc), acc
}

// ChainKey is the opaque key naming the redirectors that sent a client
// (Options.RedirectorID).
const ChainKey = "wanda.rdr"

// chainOf is the redirector chain an open's opaque reports, as the client
// sent it (bounded: 16 IDs of at most 256 bytes).
func chainOf(cgi string) []string {
	v, err := url.QueryUnescape(cgiValue(cgi, ChainKey))
	if err != nil || v == "" {
		return nil
	}
	ids := strings.Split(v, ",")
	if len(ids) > 16 {
		ids = ids[len(ids)-16:]
	}
	for i, id := range ids {
		if len(id) > 256 {
			ids[i] = id[:256]
		}
	}
	return ids
}

// protocolName is root, or roots once the session's main connection is
// on TLS.
func (ss *session) protocolName() string {
	if ss.main.tls {
		return "roots"
	}
	return "root"
}

// openOp names an open's kind for its record.
func openOp(r *request) string {
	o := xrootd.DecodeOpen(r.hdr.Body)
	if o.Options&(xrootd.OpenNew|xrootd.OpenDelete|xrootd.OpenUpdate|xrootd.OpenWriteOnly|xrootd.OpenAppend) != 0 {
		return "write"
	}
	return "read"
}

// openRecorded is open with its record: a failed open ends it at once,
// a successful one hands it to the file (add).
func (ss *session) openRecorded(ctx context.Context, r *request) error {
	ctx, acc := ss.startOpen(ctx, r, openOp(r), time.Time{})
	err := ss.open(ctx, r)
	if err != nil && acc != nil {
		failRecord(acc, err)
		acc.End()
	}
	return err
}

// redirectRecorded is redirect with a record of each kXR_open a
// redirector answers (where it sent the client, or why not). A request
// tried without waiting that must wait (errNotNow) is tried again on a
// worker: only that answer is recorded.
func (ss *session) redirectRecorded(ctx context.Context, r *request) (bool, error) {
	if r.hdr.RequestID != xrootd.ReqOpen || ss.srv.opts.Records == nil {
		return ss.redirect(ctx, r)
	}
	var note redirectNote
	start := time.Now()
	handled, err := ss.redirect(context.WithValue(auth.WithIdentitySink(ctx, &note), noteKey{}, &note), r)
	if errors.Is(err, errNotNow) {
		return handled, err
	}
	_, acc := ss.startOpen(ctx, r, openOp(r), start)
	acc.SetUser(note.user)
	acc.SetRedirect(note.to)
	switch {
	case !handled:
		acc.Succeed(monitor.ResultOK, 0)
	case err != nil:
		failRecord(acc, err)
	default:
		acc.Succeed(monitor.ResultRedirect, 0)
	}
	acc.End()
	return handled, err
}

// redirectNote keeps, for the record of a redirect, the identity the
// policy verified (auth.IdentitySink) and where the client was sent.
type redirectNote struct{ user, to string }

func (n *redirectNote) SetUser(s string) { n.user = s }

type noteKey struct{}

// failRecord sets acc's result from a request's error.
func failRecord(acc *monitor.Access, err error) {
	code, _ := codeOf(err)
	if errors.Is(err, errSent) {
		// Answered (a kXR_wait, a redirect): not a failure of the file.
		return
	}
	acc.Fail(xrdClass(code), int(code))
}

// xrdClass is the record's error class of a kXR error code.
func xrdClass(c xrootd.ErrorCode) string {
	switch c {
	case xrootd.CodeNotFound, xrootd.CodeNoReplicas, xrootd.CodeAttrNotFound:
		return monitor.ClassNotFound
	case xrootd.CodeNotAuthorized, xrootd.CodeFSReadOnly:
		return monitor.ClassForbidden
	case xrootd.CodeAuthFailed, xrootd.CodeTLSRequired, xrootd.CodeSigVerErr:
		return monitor.ClassAuth
	case xrootd.CodeItExists, xrootd.CodeFileLocked, xrootd.CodeConflict, xrootd.CodeInProgress:
		return monitor.ClassConflict
	case xrootd.CodeNoSpace, xrootd.CodeOverQuota:
		return monitor.ClassNoSpace
	case xrootd.CodeOverloaded, xrootd.CodeNoServer, xrootd.CodeNoMemory:
		return monitor.ClassUnavailable
	case xrootd.CodeReqTimedOut, xrootd.CodeTimerExpired:
		return monitor.ClassTimeout
	case xrootd.CodeCancelled:
		return monitor.ClassAbort
	case xrootd.CodeIOError, xrootd.CodeFSError, xrootd.CodeChkSumErr:
		return monitor.ClassIO
	case xrootd.CodeServerError, xrootd.CodeImpossible:
		return monitor.ClassServer
	}
	return monitor.ClassClient
}

// endFileRecord ends the record of an open file at its close: err is the
// close's (an upload's commit), abort a close at the session's end.
func (f *openFile) endRecord(err error, abort bool) {
	acc := f.acc
	if acc == nil {
		return
	}
	if f.tpc != nil {
		acc.Write(f.tpc.bytes.Load())
	}
	switch {
	case err != nil:
		failRecord(acc, err)
	case abort && (f.w != nil || f.tpc != nil):
		// A write never closed is discarded.
		acc.Fail(monitor.ClassClosed, 0)
	case !acc.Failed():
		acc.Succeed(monitor.ResultOK, 0)
	}
	acc.End()
}

// loginInfo is what a client said of itself at login (xrd.rn, its
// release; xrd.appname; xrd.info), as XRootD reports it in a user
// record: "&R=..&x=..&y=.." ("" when it named neither an application nor
// an info).
func loginInfo(cgi []byte) string {
	v, err := url.ParseQuery(string(bytes.TrimRight(cgi, "\x00")))
	if err != nil && len(v) == 0 {
		return ""
	}
	if !v.Has("xrd.appname") && !v.Has("xrd.info") {
		return ""
	}
	clean := func(s string) string { return strings.NewReplacer("&", "_", "\n", "_").Replace(s) }
	return "&R=" + clean(v.Get("xrd.rn")) + "&x=" + clean(v.Get("xrd.appname")) + "&y=" + clean(v.Get("xrd.info"))
}

// set answers kXR_set: "monitor info TEXT" hands TEXT to the monitoring
// streams and answers its dictionary id (0 when none takes it), as
// XRootD does; the rest ("appid", "monitor on|off") is acknowledged.
func (ss *session) set(r *request) error {
	args := strings.TrimSpace(string(bytes.TrimRight(r.data, "\x00")))
	if rest, ok := strings.CutPrefix(args, "monitor info"); ok {
		text := strings.TrimSpace(rest)
		if len(text) > 1024 {
			text = text[:1024]
		}
		var id [4]byte
		be32(id[:], ss.mon.Info(text))
		return r.ok(id[:])
	}
	return r.ok()
}

package httpserve

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/tpc"
)

// startRecord starts the record of a request on a file (nil: records are
// off, or r is exempt: OPTIONS, an API).
func startRecord(rs Records, r *http.Request) *monitor.Access {
	if rs.Sink == nil || r.Method == http.MethodOptions || (rs.Skip != nil && rs.Skip(r)) {
		return nil
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	// URL.Path: never the query, where tokens travel (authz=...).
	return rs.Sink.Start(monitor.Begin{Protocol: proto, Op: metricMethod(r.Method), Path: r.URL.Path, Client: r.RemoteAddr,
		Session: rs.Sessions.session(r, proto)})
}

// endRecord finishes acc with the answer: the bytes sent and received
// unless the handler counted its reads (a multi-range answer counts a
// vector read), the status and its error class, a redirect's target.
func endRecord(acc *monitor.Access, r *http.Request, hdr http.Header, status int, sent, received int64) {
	if acc == nil {
		return
	}
	if !acc.Counted() {
		switch r.Method {
		case http.MethodGet:
			if status < 300 {
				acc.ReadAt(rangeStart(hdr), sent)
			}
		case http.MethodPut:
			acc.WriteAt(0, received)
			if status < 300 {
				acc.SetSize(received)
			}
		}
	}
	switch class := monitor.HTTPClass(status); {
	case class != "":
		acc.Fail(class, status)
	case acc.Failed():
		// The handler knew better than the status (a COPY's 202 is sent
		// before the copy fails).
	case status >= 300 && status < 400 && hdr.Get("Location") != "":
		acc.SetRedirect(hdr.Get("Location"))
		acc.Succeed(monitor.ResultRedirect, status)
	default:
		acc.Succeed(monitor.ResultOK, status)
	}
	acc.End()
}

// recordFile notes an open file's size and, for a cache's file, its hit
// and miss bytes when the request ends (the returned func).
func recordFile(r *http.Request, size int64, f any) func() {
	acc := monitor.FromContext(r.Context())
	if acc == nil {
		return func() {}
	}
	acc.SetSize(size)
	acc.CacheFile(f)
	acc.Opened()
	cc, ok := f.(monitor.CacheCounter)
	if !ok {
		return func() {}
	}
	h0, m0 := cc.CacheBytes()
	return func() {
		h, m := cc.CacheBytes()
		acc.CacheBytes(h-h0, m-m0)
	}
}

// recordCopy notes a third-party copy's ends and has progress records
// tell its bytes so far.
func recordCopy(acc *monitor.Access, pull bool, remote, local string, prog *tpc.Progress) {
	if acc == nil {
		return
	}
	if pull {
		acc.SetTransfer(remote, local, "pull")
		acc.Live(func() (int64, int64) { return 0, prog.Bytes() })
		return
	}
	acc.SetTransfer(local, remote, "push")
	acc.Live(func() (int64, int64) { return prog.Bytes(), 0 })
}

// rangeStart is where a single-range answer starts (its Content-Range),
// 0 for a whole file.
func rangeStart(hdr http.Header) int64 {
	cr, ok := strings.CutPrefix(hdr.Get("Content-Range"), "bytes ")
	if !ok {
		return 0
	}
	first, _, _ := strings.Cut(cr, "-")
	n, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

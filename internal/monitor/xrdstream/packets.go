package xrdstream

import (
	"encoding/json"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
)

// The packets being filled: each stream's buffer, started at its first
// record and sent when full or due (the run goroutine owns them all).

type fBuf struct {
	b         []byte
	n, nx     int
	start     time.Time
	startUnix int32
}

type tBuf struct {
	b         []byte
	start     time.Time
	lastMark  time.Time
	markStart int32
}

type rBuf struct {
	b     []byte
	start time.Time
	mark  int32
}

type gBuf struct {
	b          []byte
	start      time.Time
	tBeg, tEnd int32
}

// send hands a finished packet to every destination, each with its own
// sequence of the packet's code.
func (s *Stream) send(pkt []byte) {
	if err := xrdmon.Finish(pkt); err != nil {
		s.dropped("too_large", 1)
		return
	}
	code := pkt[0]
	for i, d := range s.dests {
		k := seqKey{i, code}
		xrdmon.SetSeq(pkt, s.seq[k])
		s.seq[k]++
		if _, err := s.conn.WriteToUDP(pkt, d); err != nil {
			s.dropped("send_error", 1)
			if now := time.Now(); now.Sub(s.lastErr) >= time.Minute {
				s.lastErr = now
				s.o.Log.Warn("xrootd monitoring: a packet was not sent (dropped, counted in wanda_xrootd_monitor_dropped_total)",
					"dest", s.o.Dests[i], "err", err)
			}
			continue
		}
		if m := s.o.Metrics; m != nil {
			name := string(code)
			m.Packets.WithLabelValues(name).Inc()
			m.Bytes.WithLabelValues(name).Add(float64(len(pkt)))
		}
	}
}

// sendMap sends a dictionary record as its own packet, as XRootD does.
func (s *Stream) sendMap(code byte, m xrdmon.Map) {
	s.send(xrdmon.AppendMap(nil, code, s.id.stod, m))
}

// fRecord adds a record to the file stream's packet (xfr: it is an xfr
// record, counted apart in the time record).
func (s *Stream) fRecord(now time.Time, rec []byte, xfr bool) {
	f := &s.f
	if len(f.b) > 0 && len(f.b)+len(rec) > FStreamSize {
		s.flushF(now)
	}
	if len(f.b) == 0 {
		f.start, f.startUnix = now, int32(now.Unix())
		f.b = xrdmon.AppendHeader(f.b[:0], xrdmon.Header{Code: xrdmon.CodeFStream, Stod: s.id.stod})
		f.b = xrdmon.AppendTime(f.b, f.startUnix, f.startUnix, s.id.sid)
	}
	f.b = append(f.b, rec...)
	f.n++
	if xfr {
		f.nx++
	}
}

func (s *Stream) flushF(now time.Time) {
	f := &s.f
	if f.n == 0 {
		return
	}
	xrdmon.SetTime(f.b[xrdmon.HeaderLen:], f.nx, f.n, int32(now.Unix()))
	s.send(f.b)
	f.b, f.n, f.nx = f.b[:0], 0, 0
}

// tEntry adds an entry to the trace stream's packet, with a window mark
// first when the window turned.
func (s *Stream) tEntry(now time.Time, ent []byte) {
	t := &s.t
	// Room for this entry, a window mark and the closing mark.
	if len(t.b) > 0 && len(t.b)+3*xrdmon.TraceLen > TraceSize {
		s.flushT(now)
	}
	unix := int32(now.Unix())
	if len(t.b) == 0 {
		t.start, t.lastMark, t.markStart = now, now, unix
		t.b = xrdmon.AppendHeader(t.b[:0], xrdmon.Header{Code: xrdmon.CodeTrace, Stod: s.id.stod})
		t.b = xrdmon.AppendWindow(t.b, unix, unix, s.id.sid)
	} else if now.Sub(t.lastMark) >= s.o.Window {
		t.b = xrdmon.AppendWindow(t.b, t.markStart+int32(s.o.Window/time.Second), unix, s.id.sid)
		t.lastMark, t.markStart = now, unix
	}
	t.b = append(t.b, ent...)
}

func (s *Stream) flushT(now time.Time) {
	t := &s.t
	if len(t.b) <= xrdmon.HeaderLen+xrdmon.TraceLen {
		t.b, t.start = t.b[:0], time.Time{}
		return
	}
	unix := int32(now.Unix())
	t.b = xrdmon.AppendWindow(t.b, unix, unix, s.id.sid)
	s.send(t.b)
	t.b, t.start = t.b[:0], time.Time{}
}

// rEntry adds a redirection to the redirect packet.
func (s *Stream) rEntry(now time.Time, op byte, port uint16, userID uint32, host, path string) {
	r := &s.r
	n := xrdmon.RedirLen(host, path)
	if len(r.b) > 0 && len(r.b)+n+16 > RedirSize {
		s.flushR(now)
	}
	unix := int32(now.Unix())
	win := int32(min(s.o.Window/time.Second, 1<<24-1))
	if len(r.b) == 0 {
		r.start = now
		r.b = xrdmon.AppendRedirHeader(r.b[:0], s.id.stod, s.id.sid)
	}
	if r.mark != unix {
		r.b = xrdmon.AppendRedirWindow(r.b, win, unix)
		r.mark = unix
	}
	r.b = xrdmon.AppendRedirect(r.b, op, port, userID, host, path)
}

func (s *Stream) flushR(now time.Time) {
	r := &s.r
	if len(r.b) == 0 {
		return
	}
	r.b = xrdmon.AppendRedirWindow(r.b, int32(min(s.o.Window/time.Second, 1<<24-1)), int32(now.Unix()))
	s.send(r.b)
	r.b, r.start, r.mark = r.b[:0], time.Time{}, 0
}

// gRecord adds a JSON line to the g-stream packet.
func (s *Stream) gRecord(now time.Time, line []byte) {
	g := &s.g
	if xrdmon.GStreamHeaderLen+len(line)+1 > GStreamSize {
		s.dropped("too_large", 1)
		return
	}
	if len(g.b) > 0 && len(g.b)+len(line)+1 > GStreamSize {
		s.flushG(now)
	}
	unix := int32(now.Unix())
	if len(g.b) == 0 {
		g.start, g.tBeg = now, unix
		g.b = xrdmon.AppendGHeader(g.b[:0], s.id.stod, xrdmon.GSCache, s.id.sid)
	}
	g.tEnd = unix
	g.b = append(append(g.b, line...), '\n')
}

func (s *Stream) flushG(now time.Time) {
	g := &s.g
	if len(g.b) <= xrdmon.GStreamHeaderLen {
		return
	}
	g.b[len(g.b)-1] = 0 // the last newline, as XRootD ends the packet
	xrdmon.SetGWindow(g.b, g.tBeg, g.tEnd)
	s.send(g.b)
	g.b, g.start = g.b[:0], time.Time{}
}

// cacheEvent is XCache's g-stream record of a file's detach (its
// "file_close" event): the bytes served from the cache's disk (hit),
// fetched upstream (miss) and passed through (bypass), the file's blocks.
// XCache sends one when a file's last client detaches, with the count
// of its accesses; wanda sends one per access (access_cnt 1), which a
// collector sums the same way.
type cacheEvent struct {
	Event     string   `json:"event"`
	LFN       string   `json:"lfn"`
	Size      int64    `json:"size"`
	BlkSize   int64    `json:"blk_size"`
	NBlks     int      `json:"n_blks"`
	NBlksDone int      `json:"n_blks_done"`
	AccessCnt int64    `json:"access_cnt"`
	AttachT   int64    `json:"attach_t"`
	DetachT   int64    `json:"detach_t"`
	Remotes   []string `json:"remotes"`
	BHit      int64    `json:"b_hit"`
	BMiss     int64    `json:"b_miss"`
	BBypass   int64    `json:"b_bypass"`
	NCksErrs  int      `json:"n_cks_errs"`
}

func (s *Stream) cacheRecord(e monitor.Event, rec *monitor.Record) []byte {
	ev := cacheEvent{Event: "file_close", LFN: rec.Path, Size: max(rec.Size, 0), BlkSize: s.o.BlockSize,
		AccessCnt: 1, AttachT: rec.Start.Unix(), DetachT: rec.End.Unix(), Remotes: s.o.Remotes,
		BHit: rec.CacheHitBytes, BMiss: rec.CacheMissBytes}
	if cs := e.Access.CacheBlocks(); cs != nil {
		ev.BlkSize, ev.NBlks, ev.NBlksDone = cs.BlockSize, cs.Blocks, cs.Present
	} else if ev.BlkSize > 0 {
		ev.NBlks = int((ev.Size + ev.BlkSize - 1) / ev.BlkSize)
	}
	if ev.Remotes == nil {
		ev.Remotes = []string{}
	}
	b, _ := json.Marshal(ev)
	return b
}

// redirect reports a redirection: where to (host, port, path) and what
// for.
func (s *Stream) redirect(e monitor.Event) {
	if !s.o.Redir {
		return
	}
	rec := e.Access.Final(e.Time)
	host, port, path, ok := redirTarget(rec.Redirect, rec.Path)
	if !ok {
		return
	}
	var uid uint32
	if s.o.User {
		uid = s.user(e.Time, e.Session).dictID
	}
	s.rEntry(e.Time, redirOp(rec.Op), port, uid, host, path)
}

// redirTarget is where a redirect sent the client: a URL (HTTP's
// Location, root://host:port//path), or a root:// redirector's
// "host:port" with the request's path.
func redirTarget(to, reqPath string) (host string, port uint16, path string, ok bool) {
	if !strings.Contains(to, "://") {
		h, p, err := net.SplitHostPort(to)
		if err != nil {
			return "", 0, "", false
		}
		n, _ := strconv.Atoi(p)
		return h, uint16(n), reqPath, true
	}
	u, err := url.Parse(to)
	if err != nil || u.Host == "" {
		return "", 0, "", false
	}
	n, _ := strconv.Atoi(u.Port())
	if n == 0 {
		n = map[string]int{"root": 1094, "roots": 1094, "http": 80, "https": 443, "davs": 443}[u.Scheme]
	}
	path = u.Path
	if (u.Scheme == "root" || u.Scheme == "roots") && strings.HasPrefix(path, "//") {
		path = path[1:]
	}
	return u.Hostname(), uint16(n), path, true
}

// redirOp is the redirect stream's operation of a record's op.
func redirOp(op string) byte {
	switch op {
	case "read", "GET":
		return xrdmon.OpOpenR
	case "write", "PUT":
		return xrdmon.OpOpenW
	case "HEAD", "stat":
		return xrdmon.OpStat
	case "PROPFIND", "dirlist":
		return xrdmon.OpOpendir
	case "DELETE", "rm":
		return xrdmon.OpRm
	case "MKCOL", "mkdir":
		return xrdmon.OpMkdir
	case "MOVE", "mv":
		return xrdmon.OpMv
	case "locate":
		return xrdmon.OpLocate
	}
	return xrdmon.OpQuery
}

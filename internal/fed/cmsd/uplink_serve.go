package cmsd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// reader takes the manager's requests until the connection ends or the
// manager is silent for IdleTimeout.
func (u *Uplink) reader(ctx context.Context, l *link, res *result) error {
	sem := make(chan struct{}, maxStateQueries)
	buf := make([]byte, 4096)
	for {
		_ = l.c.SetReadDeadline(time.Now().Add(u.o.IdleTimeout))
		f, err := cms.ReadFrame(l.c, buf, cms.MaxData)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("reading from the manager: %w", err)
		}
		switch f.Code {
		case cms.CodePing:
			err = l.request(0, cms.CodePong, 0, nil)
		case cms.CodeState:
			path, perr := cms.ParsePath(f.Header, f.Data)
			if perr != nil {
				u.log.Warn("bad state query from the manager", "err", perr)
				continue
			}
			if f.Modifier&cms.StateNoResp != 0 {
				continue // a freshen: no answer wanted
			}
			select {
			case sem <- struct{}{}:
				go func(stream uint32) {
					defer func() { <-sem }()
					u.answerState(ctx, l, stream, path)
				}(f.StreamID)
			default:
				u.log.Debug("too many state queries at once; one left unanswered", "path", path)
			}
		case cms.CodeUsage:
			err = u.sendLoad(l)
		case cms.CodeSpace:
			err = u.sendAvail(l)
		case cms.CodeDisc:
			return errors.New("the manager disconnected us")
		case cms.CodeTry:
			hosts, terr := cms.ParseTry(f.Data)
			if terr != nil || len(hosts) == 0 {
				return fmt.Errorf("the manager sent a try with no usable hosts: %v", terr)
			}
			res.try, res.permanent = hosts, f.Modifier&cms.TryPermTop != 0
			return errors.New("the manager sent us elsewhere")
		case cms.CodeChmod, cms.CodeMkdir, cms.CodeMkpath, cms.CodeMv, cms.CodeRm, cms.CodeRmdir, cms.CodeTrunc:
			op, perr := cms.ParseForward(f.Header, f.Data)
			if perr != nil {
				u.log.Warn("bad forwarded request from the manager", "err", perr)
				continue
			}
			go u.forward(ctx, l, f.StreamID, op)
		case cms.CodePrepadd, cms.CodePrepdel:
			u.refuse(l, f.StreamID, cms.ErrENOTBLK, fmt.Sprintf("%s refused: wanda stages nothing (no tape; logged in nostage)", cms.CodeName(f.Code)))
		case cms.CodeStats:
			err = u.sendStats(l, f)
		case cms.CodeSelect, cms.CodeLocate, cms.CodeStatfs:
			u.refuse(l, f.StreamID, cms.ErrEINVAL, cms.CodeName(f.Code)+" is a redirector's request; this is a member's login")
		default:
			u.log.Warn("the manager sent a request wanda does not take", "request", cms.CodeName(f.Code))
		}
		if err != nil {
			return err
		}
	}
}

// answerState answers a state query: have when the member has path,
// silence otherwise (as cmsd does).
func (u *Uplink) answerState(ctx context.Context, l *link, stream uint32, path string) {
	lctx, cancel := context.WithTimeout(ctx, u.o.LocateTimeout)
	found := u.o.Locate != nil && u.o.Locate(lctx, path)
	cancel()
	if !found {
		return
	}
	f, err := pathFrame(stream, cms.CodeHave, cms.HaveOnline, path)
	if err == nil {
		err = l.send(f)
	}
	if err != nil {
		u.log.Debug("answering state", "path", path, "err", err)
	}
}

// forward runs a forwarded namespace operation, or refuses it.
func (u *Uplink) forward(ctx context.Context, l *link, stream uint32, op cms.Forward) {
	if u.o.Forward == nil {
		u.refuse(l, stream, cms.ErrEPERM, fmt.Sprintf("forwarded %s %s refused: this wanda %s does not run namespace operations for its manager",
			cms.CodeName(op.Code), op.Path, map[bool]string{true: "redirector", false: "member"}[u.o.Redirector]))
		return
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := u.o.Forward(fctx, op)
	cancel()
	if err != nil {
		u.refuse(l, stream, cms.ErrEINVAL, fmt.Sprintf("forwarded %s %s failed: %v", cms.CodeName(op.Code), op.Path, err))
		return
	}
	u.log.Info("forwarded request done", "op", cms.CodeName(op.Code), "path", op.Path, "to", op.Path2, "client", op.Ident)
}

// refuse logs a refusal and, when the request has a stream ID (a peer
// that waits for the answer), sends it as kYR_error. Forwarded requests
// have none: cmsd sends them one way, and an answer would be read as a
// request.
func (u *Uplink) refuse(l *link, stream uint32, code uint32, msg string) {
	u.log.Warn(msg)
	if stream != 0 {
		_ = l.respond(cms.ErrorResponse(stream, code, msg))
	}
}

// sendStats answers stats (the size only, or the statistics) with a
// short report.
func (u *Uplink) sendStats(l *link, f cms.Frame) error {
	self := u.o.Self()
	body := fmt.Sprintf(`<stats id="cms"><role>%s</role><node><host>%s</host><load>%d</load><space>%d</space></node></stats>`,
		map[bool]string{true: "manager", false: "server"}[u.o.Redirector], xmlEscape(fed.HostOf(self.URL)), self.Load.Active, self.Load.FreeBytes>>20)
	r := cms.Response{StreamID: f.StreamID, Code: cms.RespData, Val: uint32(len(body) + 1)}
	if f.Modifier&cms.StatsSize == 0 {
		r.Data = append([]byte(body), 0)
	}
	return l.respond(r)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// loadInterval is how often a member reports load and space unasked.
const loadInterval = 30 * time.Second

// writer checks the drain state every Interval (and at Beat) and sends
// it when it changes, load and space every loadInterval (and at Beat), and the queued have and gone notices. When the
// exports differ from the login's (a redirector's members changed), it
// ends the session: cmsd takes exports at login only.
func (u *Uplink) writer(ctx context.Context, l *link, suspended bool, paths string) {
	t := time.NewTicker(u.o.Interval)
	defer t.Stop()
	var lastLoad time.Time
	report := func(force bool) error {
		if p := u.loginData(u.o.Self(), suspended).Paths; p != paths {
			u.log.Info("exports changed: logging in again", "was", paths, "now", p)
			u.relogin.Store(true)
			return errors.New("exports changed")
		}
		if u.o.Suspended != nil {
			if s := u.o.Suspended(); s != suspended {
				suspended = s
				if err := u.sendStatus(l, s); err != nil {
					return err
				}
				u.setStatus(func(st *fed.ParentStatus) { st.Drained = s })
				u.log.Info("told the manager of a drain change", "suspended", s)
			}
		}
		// Load and space less often than the drain check: a manager logs
		// every report it gets.
		if !force && time.Since(lastLoad) < loadInterval {
			return nil
		}
		lastLoad = time.Now()
		if err := u.sendLoad(l); err != nil {
			return err
		}
		return u.sendAvail(l)
	}
	// Any failure, the first report's too, closes the link: the reader
	// then ends the session (and logs in again).
	err := report(true)
	for err == nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err = report(false)
		case <-u.kick:
			err = report(true)
		case n := <-u.notes:
			code, mod := uint8(cms.CodeGone), uint8(0)
			if n.present {
				code, mod = cms.CodeHave, cms.HaveOnline
			}
			f, ferr := pathFrame(0, code, mod, n.path)
			if ferr != nil {
				u.log.Debug("notice not sent", "path", n.path, "err", ferr)
				continue
			}
			err = l.send(f)
		}
		if err == nil {
			u.setStatus(func(st *fed.ParentStatus) { st.LastOK = time.Now() })
		}
	}
	_ = l.close()
}

// sendStatus tells the manager of a drain (suspend) or its end (resume,
// with the data port in the stream ID, as cmsd sends it).
func (u *Uplink) sendStatus(l *link, suspend bool) error {
	if suspend {
		return l.request(0, cms.CodeStatus, cms.StatusSuspend, nil)
	}
	return l.request(uint32(dataPort(u.o.Self())), cms.CodeStatus, cms.StatusResume, nil)
}

func (u *Uplink) sendLoad(l *link) error {
	return l.request(0, cms.CodeLoad, 0, loadOf(u.o.Self()).Data())
}

func (u *Uplink) sendAvail(l *link) error {
	ld := u.o.Self().Load
	a := cms.Avail{FreeMB: clamp32(ld.FreeBytes >> 20)}
	if ld.TotalBytes > 0 {
		a.UtilPct = uint32(min(100, (ld.TotalBytes-ld.FreeBytes)*100/ld.TotalBytes))
	}
	return l.request(0, cms.CodeAvail, 0, a.Data())
}

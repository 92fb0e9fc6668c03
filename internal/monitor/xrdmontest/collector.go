// Package xrdmontest is a UDP collector of XRootD's monitoring streams
// for tests: it listens on 127.0.0.1:0, decodes every packet with
// internal/monitor/xrdmon (summary documents too) and joins the detailed
// streams as a collector does — users by dictionary id, a file's open
// with its close — so that a test can compare what wanda sends with what
// XRootD sends.
package xrdmontest

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
)

// Collector receives and decodes packets until the test ends.
type Collector struct {
	conn *net.UDPConn
	done chan struct{}

	mu        sync.Mutex
	packets   []*xrdmon.Packet
	errs      []error
	summaries [][]xrdmon.KV
}

// Listen starts a collector on 127.0.0.1:0; it stops at the test's end.
func Listen(t testing.TB) *Collector {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadBuffer(4 << 20)
	col := &Collector{conn: c, done: make(chan struct{})}
	go col.run()
	t.Cleanup(func() {
		c.Close()
		<-col.done
	})
	return col
}

// Addr is the collector's host:port.
func (c *Collector) Addr() string { return c.conn.LocalAddr().String() }

func (c *Collector) run() {
	defer close(c.done)
	buf := make([]byte, 70000)
	for {
		n, _, err := c.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p := append([]byte(nil), buf[:n]...)
		c.mu.Lock()
		if n > 0 && p[0] == '<' {
			kv, err := xrdmon.ParseSummary(p)
			if err != nil {
				c.errs = append(c.errs, err)
			} else {
				c.summaries = append(c.summaries, kv)
			}
		} else if pk, err := xrdmon.Parse(p); err != nil {
			c.errs = append(c.errs, err)
		} else {
			c.packets = append(c.packets, pk)
		}
		c.mu.Unlock()
	}
}

// Packets is what was decoded so far.
func (c *Collector) Packets() []*xrdmon.Packet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*xrdmon.Packet(nil), c.packets...)
}

// Errors is the packets that did not decode.
func (c *Collector) Errors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// Summaries is the summary documents received, flattened.
func (c *Collector) Summaries() [][]xrdmon.KV {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]xrdmon.KV(nil), c.summaries...)
}

// Wait polls cond every 20 ms for up to d.
func Wait(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// User is a user record ('u').
type User struct {
	DictID uint32
	Ident  xrdmon.UserIdent
	Info   string
	// Disc: a disconnection was reported (trace or file stream).
	Disc bool
}

// Transfer is a file's open joined with its close, as a collector sees
// them.
type Transfer struct {
	FileID uint32
	Path   string
	User   *User
	Size   int64
	RW     bool
	// Closed: the close was seen; then Xfr, Ops (HasOps) and Forced.
	Closed, Forced, HasOps bool
	Xfr                    xrdmon.Xfr
	Ops                    xrdmon.Ops
	// Xfrs counts the xfr records of the file while open.
	Xfrs int
}

// View is the detailed streams joined.
type View struct {
	Server    *xrdmon.Map
	Users     map[uint32]*User
	Transfers []*Transfer
	// Paths are the 'd' records (file dictid: "ident\npath").
	Paths map[uint32]xrdmon.Map
	// Info are the 'i' records.
	Info      []xrdmon.Map
	Trace     []xrdmon.Trace
	Redirects []xrdmon.Redir
	GLines    []string
	// Codes counts the packets by code.
	Codes map[byte]int
}

// View joins what was received so far.
func (c *Collector) View() *View {
	v := &View{Users: map[uint32]*User{}, Paths: map[uint32]xrdmon.Map{}, Codes: map[byte]int{}}
	files := map[uint32]*Transfer{}
	for _, p := range c.Packets() {
		v.Codes[p.Code]++
		switch {
		case p.Map != nil:
			switch p.Code {
			case xrdmon.CodeIdent:
				m := *p.Map
				v.Server = &m
			case xrdmon.CodeUser:
				id, _ := xrdmon.ParseIdent(p.Map.Ident)
				v.Users[p.Map.DictID] = &User{DictID: p.Map.DictID, Ident: id, Info: p.Map.Info}
			case xrdmon.CodePath:
				v.Paths[p.Map.DictID] = *p.Map
			case xrdmon.CodeInfo:
				v.Info = append(v.Info, *p.Map)
			}
		case p.File != nil:
			for _, r := range p.File.Recs {
				switch r.Type {
				case xrdmon.RecOpen:
					tr := &Transfer{FileID: r.FileID, Path: r.LFN, Size: r.Size, RW: r.Flags&xrdmon.FlagRW != 0, User: v.Users[r.UserID]}
					files[r.FileID] = tr
					v.Transfers = append(v.Transfers, tr)
				case xrdmon.RecXfr:
					if tr := files[r.FileID]; tr != nil {
						tr.Xfrs++
					}
				case xrdmon.RecClose:
					if tr := files[r.FileID]; tr != nil {
						tr.Closed, tr.Forced, tr.Xfr = true, r.Flags&xrdmon.FlagForced != 0, r.Xfr
						tr.HasOps, tr.Ops = r.Flags&xrdmon.FlagOps != 0, r.Ops
					}
				case xrdmon.RecDisc:
					if u := v.Users[r.UserID]; u != nil {
						u.Disc = true
					}
				}
			}
		case p.Trace != nil:
			v.Trace = append(v.Trace, p.Trace...)
			for _, e := range p.Trace {
				if e.Code == xrdmon.TraceDisc {
					if u := v.Users[e.DictID]; u != nil {
						u.Disc = true
					}
				}
			}
		case p.Redir != nil:
			for _, e := range p.Redir.Entries {
				if !e.Window {
					v.Redirects = append(v.Redirects, e)
				}
			}
		case p.G != nil:
			v.GLines = append(v.GLines, p.G.Lines...)
		}
	}
	return v
}

// Find is the first transfer of path (nil: none).
func (v *View) Find(path string) *Transfer {
	for _, t := range v.Transfers {
		if t.Path == path {
			return t
		}
	}
	return nil
}

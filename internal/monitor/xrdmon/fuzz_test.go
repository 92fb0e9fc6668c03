package xrdmon

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse decodes arbitrary bytes as a packet: nothing may panic or
// read past the packet, and what decodes re-encodes to a packet that
// decodes to the same values.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.bin"))
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	b := AppendHeader(nil, Header{Code: CodeTrace})
	b = AppendWindow(b, 1, 2, 3)
	b = AppendTraceClose(b, 9, 1<<40, 5)
	f.Add(finishF(b))
	b = AppendRedirHeader(nil, 1, 2)
	b = AppendRedirect(b, OpStat, 1094, 7, "h", "/p")
	f.Add(finishF(b))
	b = AppendGHeader(nil, 1, GSCache, 2)
	f.Add(finishF(append(b, "{}\n{}\x00"...)))
	f.Fuzz(func(t *testing.T, p []byte) {
		pk, err := Parse(p)
		if err != nil {
			return
		}
		again, err := Parse(reencode(t, pk))
		if err != nil {
			t.Fatalf("re-encoded packet does not parse: %v", err)
		}
		again.Len = pk.Len
		if !reflect.DeepEqual(normal(pk), normal(again)) {
			t.Fatalf("re-encoded packet decodes to\n%+v\nnot\n%+v", again, pk)
		}
	})
}

// FuzzParseSummary: no panic on any input.
func FuzzParseSummary(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "xrootd-5.5.3-summary.xml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`<statistics tod="1"><stats id="a"><b>1<c>2</c></b></stats></statistics>`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseSummary(b) })
}

func finishF(p []byte) []byte {
	_ = Finish(p)
	return p
}

// normal drops what re-encoding legitimately changes: a truncated-time
// record's missing server id, values past the bits the wire keeps.
func normal(p *Packet) *Packet {
	c := *p
	c.Seq = 0
	if c.File != nil {
		fs := *c.File
		fs.Time.Flags = 0
		recs := make([]FileRec, len(fs.Recs))
		for i, r := range fs.Recs {
			switch r.Type {
			case RecOpen:
				r.Flags &= FlagLFN | FlagRW
			case RecClose:
				r.Flags &= FlagForced | FlagOps | FlagSSQ
				if r.Flags&FlagSSQ != 0 {
					r.Flags |= FlagOps
				}
			default:
				r.Flags = 0
			}
			recs[i] = r
		}
		fs.Recs = recs
		c.File = &fs
	}
	return &c
}

// reencode builds a packet from decoded values with this package's
// encoders.
func reencode(t *testing.T, pk *Packet) []byte {
	h := Header{Code: pk.Code, Seq: pk.Seq, Stod: pk.Stod}
	var b []byte
	switch {
	case pk.Map != nil:
		b = AppendMap(nil, pk.Code, pk.Stod, *pk.Map)
	case pk.File != nil:
		b = AppendHeader(nil, h)
		tm := pk.File.Time
		b = AppendTime(b, tm.TBeg, tm.TEnd, tm.SID)
		SetTime(b[HeaderLen:], int(tm.NXfr), int(tm.NTotal), tm.TEnd)
		for _, r := range pk.File.Recs {
			b = appendFileRec(b, r)
		}
	case pk.Trace != nil || pk.Code == CodeTrace:
		b = AppendHeader(nil, h)
		for _, e := range pk.Trace {
			b = appendTraceEntry(b, e)
		}
	case pk.Redir != nil:
		b = AppendRedirHeader(nil, pk.Stod, pk.Redir.SID)
		for _, e := range pk.Redir.Entries {
			if e.Window {
				b = AppendRedirWindow(b, e.Len, e.Time)
				continue
			}
			b = AppendRedirect(b, e.Op, e.Port, e.UserID, e.Host, e.Path)
			b[len(b)-RedirLen(e.Host, e.Path)] |= e.Kind
		}
	case pk.G != nil:
		b = AppendGHeader(nil, pk.Stod, pk.G.Type, pk.G.SID)
		SetGWindow(b, pk.G.TBeg, pk.G.TEnd)
		for _, l := range pk.G.Lines {
			b = append(append(b, l...), '\n')
		}
	}
	if len(b) > MaxPacket {
		t.Skip("re-encoded packet too large")
	}
	return finishF(b)
}

func appendFileRec(b []byte, r FileRec) []byte {
	switch r.Type {
	case RecOpen:
		return AppendOpen(b, r.FileID, r.Size, r.Flags&FlagRW != 0, r.Flags&FlagLFN != 0, r.UserID, r.LFN)
	case RecClose:
		var ops *Ops
		var ssq *SSQ
		if r.Flags&(FlagOps|FlagSSQ) != 0 {
			ops = &r.Ops
		}
		if r.Flags&FlagSSQ != 0 {
			ssq = &r.SSQ
		}
		return AppendClose(b, r.FileID, r.Flags&FlagForced != 0, r.Xfr, ops, ssq)
	case RecXfr:
		return AppendXfrRec(b, r.FileID, r.Xfr)
	case RecDisc:
		return AppendDisc(b, r.UserID)
	case RecTime:
		b = AppendTime(b, r.TBeg, r.TEnd, r.SID)
		SetTime(b[len(b)-timeRecLen:], int(r.NXfr), int(r.NTotal), r.TEnd)
		return b
	}
	return b
}

func appendTraceEntry(b []byte, e Trace) []byte {
	switch e.Code {
	case TraceRead:
		return AppendTraceRead(b, e.DictID, e.Offset, e.Len)
	case TraceWrite:
		return AppendTraceWrite(b, e.DictID, e.Offset, e.Len)
	case TraceOpen:
		return AppendTraceOpen(b, e.DictID, e.Offset)
	case TraceClose:
		return AppendTraceClose(b, e.DictID, e.RTot, e.WTot)
	case TraceDisc:
		return AppendTraceDisc(b, e.DictID, e.Secs, e.Flags)
	case TraceReadV, TraceReadU:
		b = AppendTraceReadV(b, e.DictID, e.Len, e.Count, e.Seq)
		b[len(b)-TraceLen] = e.Code
		return b
	case TraceWindow:
		return AppendWindow(b, e.Prev, e.Start, e.SID)
	case TraceAppID:
		return AppendTraceAppID(b, e.AppID)
	}
	return b
}

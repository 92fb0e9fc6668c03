package xrdmon

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// finish sets a built packet's length.
func finish(t testing.TB, p []byte) []byte {
	t.Helper()
	if err := Finish(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// XRootD 5.5.3's own packets (testdata: captured from xrootd with
// `xrootd.monitor all auth flush 1s fstat 1s lfn ops xfr 5 dest fstat
// info user redir`, after an xrdcp read, an xrdcp upload and a curl GET)
// decode to what it sent.
func TestParseXRootD(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p, err := Parse(read("xrootd-5.5.3-0-ident.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Code != CodeIdent || p.Map.DictID != 0 || !strings.HasPrefix(p.Map.Ident, "=/xrootd.") {
		t.Fatalf("ident: %+v %+v", p.Header, p.Map)
	}
	kv := CGI(p.Map.Info)
	if len(kv) != 5 || kv[0][0] != "site" || kv[3] != [2]string{"pgm", "xrootd"} || kv[4] != [2]string{"ver", "v5.5.3"} {
		t.Fatalf("ident info: %q", kv)
	}
	u, err := Parse(read("xrootd-5.5.3-1-u.bin"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := ParseIdent(u.Map.Ident)
	if err != nil {
		t.Fatal(err)
	}
	if u.Map.DictID != 1 || id.Protocol != "xroot" || id.User != "root" || id.Host != "localhost" || u.Map.Info != "&R=v5.5.3&x=xrdcp&y=&I=4" {
		t.Fatalf("user: %+v %+v", u.Map, id)
	}
	h, _ := Parse(read("xrootd-5.5.3-3-u.bin"))
	if id, _ := ParseIdent(h.Map.Ident); id.Protocol != "http" || id.User != "unknown" {
		t.Fatalf("http user: %+v", h.Map)
	}
	f, err := Parse(read("xrootd-5.5.3-4-f.bin"))
	if err != nil {
		t.Fatal(err)
	}
	var opens, closes []FileRec
	for _, r := range f.File.Recs {
		switch r.Type {
		case RecOpen:
			opens = append(opens, r)
		case RecClose:
			closes = append(closes, r)
		}
	}
	// fstat also reports each user's disconnect (isDisc).
	if len(opens) != 3 || len(closes) != 3 || f.File.Time.NTotal != 9 || f.File.Time.SID == 0 {
		t.Fatalf("f-stream: %+v", f.File)
	}
	if opens[0].LFN != "/big" || opens[0].Size != 4<<20 || opens[0].UserID != 1 || opens[1].LFN != "/up.bin" || opens[1].Flags&FlagRW == 0 {
		t.Errorf("opens: %+v", opens)
	}
	if closes[0].Xfr.Read != 4<<20 || closes[0].Ops.Read != 1 || closes[1].Xfr.Write < 4<<20 || closes[2].Xfr.Read != 6 {
		t.Errorf("closes: %+v", closes)
	}
	kvs, err := ParseSummary(read("xrootd-5.5.3-summary.xml"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range kvs {
		got[kv.Key] = kv.Value
	}
	for k, v := range map[string]string{"pgm": "xrootd", "ver": "v5.5.3", "link.tot": "3", "xrootd.ops.open": "3",
		"oss.paths": "1", "oss.paths.0.lp": "/", "ofs.role": "server", "proc.sys.s": "0"} {
		if got[k] != v {
			t.Errorf("summary %s = %q, want %q", k, got[k], v)
		}
	}
}

// Every record type decodes to what was encoded.
func TestRoundTrip(t *testing.T) {
	const stod, sid = 1700000000, 0x123456789abc
	m := Map{DictID: 7, Ident: "xroot/alice.42:1234@host.example", Info: "&p=ztn&n=alice", HasInfo: true}
	p, err := Parse(finish(t, AppendMap(nil, CodeUser, stod, m)))
	if err != nil || !reflect.DeepEqual(*p.Map, m) || p.Stod != stod {
		t.Fatalf("map: %+v %v", p, err)
	}

	ops := &Ops{Read: 3, Readv: 1, Write: 0, RsMin: 2, RsMax: 2, Rsegs: 2, RdMin: 10, RdMax: 100, RvMin: 50, RvMax: 50}
	b := AppendHeader(nil, Header{Code: CodeFStream, Stod: stod})
	b = AppendTime(b, 100, 0, sid)
	b = AppendOpen(b, 9, 12345, false, true, 7, "/store/a.root")
	b = AppendOpen(b, 10, 0, true, false, 0, "")
	b = AppendXfrRec(b, 9, Xfr{Read: 5})
	b = AppendClose(b, 9, false, Xfr{Read: 200, Readv: 50}, ops, nil)
	b = AppendClose(b, 10, true, Xfr{Write: 7}, nil, &SSQ{Write: 49})
	b = AppendDisc(b, 7)
	SetTime(b[HeaderLen:], 1, 6, 101)
	p, err = Parse(finish(t, b))
	if err != nil {
		t.Fatal(err)
	}
	fs := p.File
	if fs.Time.TBeg != 100 || fs.Time.TEnd != 101 || fs.Time.SID != sid || fs.Time.NXfr != 1 || len(fs.Recs) != 6 {
		t.Fatalf("time: %+v", fs.Time)
	}
	r := fs.Recs
	if r[0].LFN != "/store/a.root" || r[0].UserID != 7 || r[0].Size != 12345 || r[0].Flags != FlagLFN || r[1].Flags != FlagRW ||
		r[2].Xfr.Read != 5 || !reflect.DeepEqual(r[3].Ops, *ops) || r[3].Xfr.Readv != 50 || r[4].Flags != FlagForced|FlagOps|FlagSSQ ||
		r[4].SSQ.Write != 49 || r[5].Type != RecDisc || r[5].UserID != 7 {
		t.Fatalf("records: %+v", r)
	}
	if n := OpenLen("/store/a.root", true); n%4 != 0 || n-openMinLen-4-len("/store/a.root") < 5 {
		t.Errorf("open record of %d bytes: the path must end with 5 to 8 NULs", n)
	}

	b = AppendHeader(nil, Header{Code: CodeTrace, Stod: stod})
	b = AppendWindow(b, 90, 100, sid)
	b = AppendTraceOpen(b, 9, 5000)
	b = AppendTraceRead(b, 9, 4096, 1000)
	b = AppendTraceWrite(b, 9, 8192, 300)
	b = AppendTraceReadV(b, 9, 700, 3, 1)
	b = AppendTraceAppID(b, "myapp")
	b = AppendTraceClose(b, 9, 5<<32+3, 300)
	b = AppendTraceDisc(b, 7, 12, DiscForced)
	b = AppendWindow(b, 160, 160, sid)
	p, err = Parse(finish(t, b))
	if err != nil {
		t.Fatal(err)
	}
	tr := p.Trace
	if len(tr) != 9 || tr[0].Code != TraceWindow || tr[0].Prev != 90 || tr[0].SID != sid || tr[1].Offset != 5000 ||
		tr[2].Code != TraceRead || tr[2].Offset != 4096 || tr[2].Len != 1000 || tr[3].Code != TraceWrite || tr[3].Len != 300 ||
		tr[4].Count != 3 || tr[4].Len != 700 || tr[5].AppID != "myapp" || tr[6].WTot != 300 || tr[6].RTot != 5<<32 ||
		tr[7].Secs != 12 || tr[7].DictID != 7 {
		t.Fatalf("trace: %+v", tr)
	}

	b = AppendRedirHeader(nil, stod, sid)
	b = AppendRedirWindow(b, 60, 100)
	b = AppendRedirect(b, OpOpenR, 1094, 7, "server.example", "/store/a.root")
	b = AppendRedirWindow(b, 60, 101)
	p, err = Parse(finish(t, b))
	if err != nil {
		t.Fatal(err)
	}
	e := p.Redir.Entries
	if p.Redir.SID != sid || len(e) != 3 || !e[0].Window || e[1].Host != "server.example" || e[1].Path != "/store/a.root" ||
		e[1].Port != 1094 || e[1].Op != OpOpenR || e[1].UserID != 7 || e[2].Time != 101 {
		t.Fatalf("redir: %+v", p.Redir)
	}

	b = AppendGHeader(nil, stod, GSCache, sid)
	b = append(b, `{"event":"file_close","lfn":"/a"}`+"\n"+`{"event":"file_close","lfn":"/b"}`+"\x00"...)
	SetGWindow(b, 100, 102)
	p, err = Parse(finish(t, b))
	if err != nil || p.G.Type != GSCache || p.G.SID != sid || len(p.G.Lines) != 2 || p.G.TEnd != 102 {
		t.Fatalf("g: %+v %v", p.G, err)
	}
}

func TestSummaryWriter(t *testing.T) {
	var w XMLWriter
	w.Head(SummaryHead{Tod: 2, Version: "wanda 1", Host: "h", Port: 1094, Tos: 1, Program: "wanda", Name: "anon", PID: 9, Site: "a&b"})
	w.Stats("link")
	w.Int("num", 3)
	w.End("stats")
	w.Stats("oss", "v", "2")
	w.Start("paths")
	w.Text("1")
	w.Stats("0")
	w.Leaf("lp", `"/x<y"`)
	w.End("stats")
	w.End("paths")
	w.End("stats")
	w.End("statistics")
	kv, err := ParseSummary(w.B)
	if err != nil {
		t.Fatal(err)
	}
	want := []KV{{"tod", "2"}, {"ver", "wanda 1"}, {"src", "h:1094"}, {"tos", "1"}, {"pgm", "wanda"}, {"ins", "anon"},
		{"pid", "9"}, {"site", "a&b"}, {"link.num", "3"}, {"oss.paths", "1"}, {"oss.paths.0.lp", "/x<y"}}
	if !reflect.DeepEqual(kv, want) {
		t.Fatalf("got %q\nwant %q", kv, want)
	}
}

func TestParseErrors(t *testing.T) {
	for name, p := range map[string][]byte{
		"short":        {'u', 0, 0},
		"length":       finish(t, AppendMap(nil, CodeUser, 1, Map{Ident: "x"}))[:10],
		"unknown code": finish(t, AppendHeader(nil, Header{Code: 'Z'})),
		"no time":      finish(t, AppendDisc(AppendHeader(nil, Header{Code: CodeFStream}), 1)),
		"trace":        finish(t, append(AppendHeader(nil, Header{Code: CodeTrace}), 1, 2, 3)),
	} {
		if _, err := Parse(p); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := ParseIdent("nohost"); err == nil {
		t.Error("ident without @ parsed")
	}
	if _, err := ParseSummary([]byte("<x/>")); err == nil {
		t.Error("summary without <statistics> parsed")
	}
}

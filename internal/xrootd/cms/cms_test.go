package cms

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

// loginFromCmsd is the login an XRootD 5.5.3 cmsd (all.role server,
// all.export /store, data port 21094) sent its manager on this project's
// test machine: a frame header, then the packed data.
const loginFromCmsd = "000000000000005a" +
	"800003a000800248a000003cf8a00003efe3a00001369aa0000028008000018000468052668095f5" +
	"0019732d616e6f6e40766d2032313231336c6f63616c686f737400000977202f73746f726500000000086d79484e3d766d00"

func TestParseCmsdLogin(t *testing.T) {
	raw, err := hex.DecodeString(loginFromCmsd)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(bytes.NewReader(raw), nil, MaxLoginData)
	if err != nil {
		t.Fatal(err)
	}
	if f.Code != CodeLogin || f.StreamID != 0 || int(f.DataLen) != len(raw)-HeaderLen {
		t.Fatalf("header %+v", f.Header)
	}
	l, err := ParseLogin(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	want := Login{
		Version: 3, Mode: ModeServer | ModeNoStage | ModeBLRedir | 16<<ModeTZoneShift, HoldTime: 15608,
		TotalMB: 258019, FreeMB: 79514, MinFreeMB: 10240, NumFS: 1, FSUtil: 70, DataPort: 21094, SubsPort: 38389,
		SID: "s-anon@vm 21213localhost", Paths: "w /store", EnvCGI: "myHN=vm",
	}
	if l != want {
		t.Fatalf("got  %+v\nwant %+v", l, want)
	}
	if Role(l.Mode) != "server" {
		t.Errorf("role %q", Role(l.Mode))
	}
	paths, err := ParsePaths(l.Paths)
	if err != nil || len(paths) != 1 || paths[0] != (PathEntry{"w", "/store"}) || !paths[0].Writable() {
		t.Fatalf("paths %+v %v", paths, err)
	}
	if Env(l.EnvCGI, "myHN") != "vm" || Env(l.EnvCGI, "site") != "" {
		t.Error("env")
	}
	// Packing it again gives cmsd's bytes.
	data, err := want.Data()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, f.Data) {
		t.Fatalf("packed\n%x\nwant\n%x", data, f.Data)
	}
}

func TestInlineInt(t *testing.T) {
	// XrdOucPup's inline form of an int (its top bits clear): the value
	// with 0xb0 in its first byte, as avail and load carry them.
	u := NewUnpacker([]byte{0xb0, 0x00, 0x01, 0x02, 0xa0, 0x10, 0x00, 0x00, 0x01})
	if v := u.Int("a"); v != 0x102 {
		t.Errorf("inline %#x", v)
	}
	if v := u.Int("b"); v != 0x10000001 {
		t.Errorf("long form %#x", v)
	}
	if u.Err() != nil || len(u.Rest()) != 0 {
		t.Fatal(u.Err(), u.Rest())
	}
}

func TestRoundTrips(t *testing.T) {
	l := Load{CPU: 1, Net: 2, Xeq: 3, Mem: 4, Pag: 5, Dsk: 6, FreeMB: 1 << 20}
	if got, err := ParseLoad(l.Data()); err != nil || got != l {
		t.Errorf("load %+v %v", got, err)
	}
	a := Avail{FreeMB: 77, UtilPct: 12}
	if got, err := ParseAvail(a.Data()); err != nil || got != a {
		t.Errorf("avail %+v %v", got, err)
	}
	for _, raw := range []bool{true, false} {
		d, err := PathData("/store/a b", raw)
		if err != nil {
			t.Fatal(err)
		}
		mod := uint8(0)
		if raw {
			mod = ModRaw
		}
		if p, err := ParsePath(Header{Code: CodeHave, Modifier: mod}, d); err != nil || p != "/store/a b" {
			t.Errorf("path raw=%v: %q %v", raw, p, err)
		}
	}
	td, _ := TryData([]string{"a:1213", "b:1213"})
	if hs, err := ParseTry(td); err != nil || !reflect.DeepEqual(hs, []string{"a:1213", "b:1213"}) {
		t.Errorf("try %v %v", hs, err)
	}
	for _, f := range []Forward{
		{Code: CodeRm, Ident: "u.1:2@h", Path: "/store/x"},
		{Code: CodeMv, Ident: "u", Path: "/a", Path2: "/b", Opaq: "x=1", Opaq2: "y=2"},
		{Code: CodeMkdir, Ident: "u", Mode: "755", Path: "/d"},
		{Code: CodeTrunc, Ident: "u", Mode: "10", Path: "/d", Opaq: "o"},
	} {
		d, err := f.Data()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseForward(Header{Code: f.Code}, d)
		if err != nil || got != f {
			t.Errorf("%s: %+v %v", CodeName(f.Code), got, err)
		}
	}
	s := Select{Ident: "i", Opts: 0x1008, Path: "/p", Avoid: "h:1"}
	d, _ := s.Data()
	if got, err := ParseSelect(d); err != nil || got != s {
		t.Errorf("select %+v %v", got, err)
	}
	r := ErrorResponse(7, ErrENOENT, "no such file")
	fr, err := r.Frame()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadFrame(bytes.NewReader(fr.Bytes()), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseResponse(back)
	if err != nil || got.Val != ErrENOENT || got.Text() != "no such file" || got.StreamID != 7 || got.Code != RespError {
		t.Errorf("response %+v %v", got, err)
	}
}

func TestRefused(t *testing.T) {
	for name, c := range map[string]struct {
		h    Header
		data []byte
	}{
		"truncated string":  {Header{Code: CodeHave}, []byte{0, 9, 'a'}},
		"number for path":   {Header{Code: CodeState}, []byte{0xa0, 0, 0, 0, 1}},
		"NUL inside raw":    {Header{Code: CodeGone, Modifier: ModRaw}, []byte("/a\x00b\x00")},
		"empty raw path":    {Header{Code: CodeHave, Modifier: ModRaw}, []byte{0}},
		"missing path":      {Header{Code: CodeState}, nil},
		"NUL inside packed": {Header{Code: CodeState}, []byte{0, 4, '/', 0, 'a', 0}},
	} {
		if _, err := ParsePath(c.h, c.data); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ParseLoad([]byte{0, 2, 1, 2, 0xa0, 0, 0, 0, 0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("short load: %v", err)
	}
	if _, err := ParseLogin([]byte{0x80, 0, 3}); !errors.Is(err, ErrMalformed) {
		t.Errorf("short login: %v", err)
	}
	if _, err := ParsePaths("x /a"); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad path type: %v", err)
	}
	// An announced length over the limit: refused before reading on.
	big := Header{Code: CodeState, DataLen: MaxData + 1}.Append(nil)
	if _, err := ReadFrame(bytes.NewReader(big), nil, 0); !errors.Is(err, ErrMalformed) {
		t.Errorf("oversized: %v", err)
	}
	// A frame that ends early.
	short := append(Header{Code: CodeState, DataLen: 10}.Append(nil), 1, 2)
	if _, err := ReadFrame(bytes.NewReader(short), nil, 0); err == nil {
		t.Error("truncated frame read")
	}
	var p Packer
	p.String(string(make([]byte, MaxString)))
	if _, err := p.Bytes(); err == nil {
		t.Error("a string cmsd cannot pack was packed")
	}
}

func TestPathHash(t *testing.T) {
	// XrdOucCRC::CRC32 is the reflected CRC-32 of 0x04C11DB7 (IEEE), in
	// host (little-endian) order on the wire: an XRootD 5.5.3 manager
	// asked its server "state /store/x/f.bin" with the stream ID bytes
	// d2 6c 8f 47.
	if h := PathHash("123456789"); h != 0x2639F4CB {
		t.Errorf("hash %#x", h)
	}
	if h := PathHash("/store/x/f.bin"); h != 0xd26c8f47 {
		t.Errorf("hash %#x, want the manager's 0xd26c8f47", h)
	}
}

package xrootd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

func TestRequestHeaderRoundTrip(t *testing.T) {
	h := RequestHeader{StreamID: StreamID{1, 2}, RequestID: ReqRead, Body: ReadRequest{Handle: Handle{0, 0, 0, 7}, Offset: 1 << 40, Length: 4096}.Body(), Dlen: 8}
	b := h.Append(nil)
	if len(b) != RequestHeaderLen {
		t.Fatalf("header is %d bytes", len(b))
	}
	want := "0102" + "0bc5" + "00000007" + "0000010000000000" + "00001000" + "00000008"
	if got := hex.EncodeToString(b); got != want {
		t.Errorf("wire %s, want %s", got, want)
	}
	h2, err := DecodeRequestHeader(b)
	if err != nil || h2 != h {
		t.Fatalf("decode: %+v %v", h2, err)
	}
	r := DecodeRead(h2.Body)
	if r.Handle != (Handle{0, 0, 0, 7}) || r.Offset != 1<<40 || r.Length != 4096 {
		t.Errorf("read body %+v", r)
	}
	if _, err := DecodeRequestHeader(b[:23]); !errors.Is(err, ErrShort) {
		t.Errorf("short header: %v", err)
	}
	b[20] = 0x80
	if _, err := DecodeRequestHeader(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("negative dlen: %v", err)
	}
}

func TestBodiesRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		enc  [16]byte
		dec  func([16]byte) any
		want any
	}{
		{"protocol", ProtocolRequest{ClientPV: ProtocolVersion, Flags: ProtoAbleTLS, Expect: ExpectLogin}.Body(), func(b [16]byte) any { return DecodeProtocol(b) }, ProtocolRequest{ClientPV: ProtocolVersion, Flags: ProtoAbleTLS, Expect: ExpectLogin}},
		{"login", LoginRequest{PID: 42, Username: [8]byte{'a', 'l', 'i', 'c', 'e'}, Ability: LoginFullURL, CapVer: LoginVersion5}.Body(), func(b [16]byte) any { return DecodeLogin(b) }, LoginRequest{PID: 42, Username: [8]byte{'a', 'l', 'i', 'c', 'e'}, Ability: LoginFullURL, CapVer: LoginVersion5}},
		{"auth", AuthRequest{CredType: [4]byte{'u', 'n', 'i', 'x'}}.Body(), func(b [16]byte) any { return DecodeAuth(b) }, AuthRequest{CredType: [4]byte{'u', 'n', 'i', 'x'}}},
		{"open", OpenRequest{Mode: ModeUR | ModeUW, Options: OpenNew | OpenMkpath, OptionsT: OpenRetstatx, Template: Handle{9}}.Body(), func(b [16]byte) any { return DecodeOpen(b) }, OpenRequest{Mode: ModeUR | ModeUW, Options: OpenNew | OpenMkpath, OptionsT: OpenRetstatx, Template: Handle{9}}},
		{"write", WriteRequest{Handle: Handle{1, 2, 3, 4}, Offset: 5, PathID: 6, ReqFlags: PgRetry}.Body(), func(b [16]byte) any { return DecodeWrite(b) }, WriteRequest{Handle: Handle{1, 2, 3, 4}, Offset: 5, PathID: 6, ReqFlags: PgRetry}},
		{"stat", StatRequest{Options: StatVFS, Wants: 1, Handle: Handle{4}}.Body(), func(b [16]byte) any { return DecodeStat(b) }, StatRequest{Options: StatVFS, Wants: 1, Handle: Handle{4}}},
		{"mkdir", MkdirRequest{Options: MkdirPath, Mode: ModeUR | ModeUX}.Body(), func(b [16]byte) any { return DecodeMkdir(b) }, MkdirRequest{Options: MkdirPath, Mode: ModeUR | ModeUX}},
		{"query", QueryRequest{Type: QueryChecksum, Handle: Handle{3}}.Body(), func(b [16]byte) any { return DecodeQuery(b) }, QueryRequest{Type: QueryChecksum, Handle: Handle{3}}},
		{"prepare", PrepareRequest{Options: PrepareStage, Priority: 1, Port: 1094, OptionX: PrepareEvict}.Body(), func(b [16]byte) any { return DecodePrepare(b) }, PrepareRequest{Options: PrepareStage, Priority: 1, Port: 1094, OptionX: PrepareEvict}},
		{"dirlist", DirlistBody(DirlistDStat), func(b [16]byte) any { return DecodeDirlist(b) }, byte(DirlistDStat)},
		{"locate", LocateBody(LocateRefresh), func(b [16]byte) any { return DecodeLocate(b) }, LocateRefresh},
		{"readv", ReadVBody(3), func(b [16]byte) any { return DecodeReadVPath(b) }, byte(3)},
		{"chmod", ChmodBody(ModeOR), func(b [16]byte) any { return DecodeChmod(b) }, ModeOR},
		{"handle", HandleBody(Handle{1, 1, 1, 1}), func(b [16]byte) any { return DecodeHandle(b) }, Handle{1, 1, 1, 1}},
		{"session", SessionID{1, 2, 3}.Body(), func(b [16]byte) any { return DecodeSession(b) }, SessionID{1, 2, 3}},
	} {
		if got := c.dec(c.enc); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if u := (LoginRequest{Username: [8]byte{'b', 'o', 'b'}}).User(); u != "bob" {
		t.Errorf("user %q", u)
	}
	if u := (AuthRequest{CredType: [4]byte{'z', 't', 'n'}}).Type(); u != "ztn" {
		t.Errorf("cred type %q", u)
	}
}

func TestModePerm(t *testing.T) {
	for _, p := range []uint32{0, 0o644, 0o755, 0o777, 0o400} {
		if got := ModeFromPerm(p).Perm(); got != p {
			t.Errorf("%o -> %o", p, got)
		}
	}
	if ModeFromPerm(0o640) != ModeUR|ModeUW|ModeGR {
		t.Errorf("0640 = %x", ModeFromPerm(0o640))
	}
}

func TestSplitMv(t *testing.T) {
	for _, c := range []struct {
		n        int16
		data     string
		from, to string
		ok       bool
	}{
		{0, "/a /b", "/a", "/b", true},
		{0, "/a   /b\x00", "/a", "/b", true},
		{2, "/a /b c", "/a", "/b c", true},
		{0, "/a", "", "", false},
		{5, "/a /b", "", "", false},
		{-1, "/a /b", "", "", false},
		{1, "/a /b", "", "", false},
		{0, " /b", "", "", false},
	} {
		from, to, err := SplitMv(c.n, []byte(c.data))
		if (err == nil) != c.ok || from != c.from || to != c.to {
			t.Errorf("SplitMv(%d, %q) = %q %q %v", c.n, c.data, from, to, err)
		}
	}
}

func TestSegmentsAndReadArgs(t *testing.T) {
	segs := []Segment{{Handle{1}, 10, 0}, {Handle{2}, 4096, 1 << 33}}
	var b []byte
	for _, s := range segs {
		b = AppendSegment(b, s)
	}
	got, err := DecodeSegments(b, 0)
	if err != nil || !reflect.DeepEqual(got, segs) {
		t.Fatalf("segments %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, b[:15], append(bytes.Clone(b), 1)} {
		if _, err := DecodeSegments(bad, 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%d bytes: %v", len(bad), err)
		}
	}
	if _, err := DecodeSegments(b, 1); err == nil {
		t.Error("over the limit accepted")
	}
	neg := AppendSegment(nil, Segment{Length: -1})
	if _, err := DecodeSegments(neg, 0); err == nil {
		t.Error("negative length accepted")
	}

	a := ReadArgs{PathID: 2, PreRead: segs}
	ra, err := DecodeReadArgs(a.Append(nil))
	if err != nil || !reflect.DeepEqual(ra, a) {
		t.Fatalf("read args %+v %v", ra, err)
	}
	if ra, err := DecodeReadArgs([]byte{5}); err != nil || ra.PathID != 5 {
		t.Errorf("1-byte read args %+v %v", ra, err)
	}
	if _, err := DecodeReadArgs(make([]byte, 9)); err == nil {
		t.Error("ragged pre-read list accepted")
	}
}

func TestResponses(t *testing.T) {
	b := AppendResponse(nil, StreamID{0, 1}, StatusError, ErrorResponse{Code: CodeNotFound, Msg: "no such file"}.Append(nil))
	h, err := DecodeResponseHeader(b)
	if err != nil || h.Status != StatusError || int(h.Dlen) != len(b)-8 {
		t.Fatalf("header %+v %v", h, err)
	}
	e, err := DecodeErrorResponse(b[8:])
	if err != nil || e.Code != CodeNotFound || e.Msg != "no such file" || b[len(b)-1] != 0 {
		t.Errorf("error %+v %v", e, err)
	}
	if (&e).Error() != "kXR_NotFound: no such file" {
		t.Errorf("Error() = %q", (&e).Error())
	}

	hs := AppendServerHandshake(nil, HandshakeDataServer)
	if got := hex.EncodeToString(hs); got != "0000000000000008"+"00000520"+"00000001" {
		t.Errorf("server handshake %s", got)
	}
	v, st, err := DecodeServerHandshake(hs)
	if err != nil || v != ProtocolVersion || st != HandshakeDataServer {
		t.Errorf("decode handshake %x %d %v", v, st, err)
	}
	ch := AppendHandshake(nil)
	if !IsHandshake(ch) || IsHandshake(ch[:19]) || IsHandshake(append([]byte{1}, ch[1:]...)) {
		t.Error("IsHandshake")
	}

	or := OpenResponse{Handle: Handle{0, 0, 0, 1}, Stat: "1 2 0 3"}
	o, err := DecodeOpenResponse(or.Append(nil))
	if err != nil || o != or {
		t.Errorf("open %+v %v", o, err)
	}
	if n := len(OpenResponse{Handle: Handle{1}}.Append(nil)); n != 4 {
		t.Errorf("bare open answer %d bytes", n)
	}
	lr := LoginResponse{Session: SessionID{1}, Security: "&P=unix"}
	l, err := DecodeLoginResponse(lr.Append(nil))
	if err != nil || l != lr {
		t.Errorf("login %+v %v", l, err)
	}
	pr := ProtocolResponse{Version: ProtocolVersion, Flags: FlagIsServer | FlagSupPgRW}
	p, err := DecodeProtocolResponse(pr.Append(nil))
	if err != nil || p != pr {
		t.Errorf("protocol %+v %v", p, err)
	}
	rr := RedirectResponse{Port: 1094, Host: "a.b?x=y"}
	r, err := DecodeRedirectResponse(rr.Append(nil))
	if err != nil || r != rr {
		t.Errorf("redirect %+v %v", r, err)
	}
	wr := WaitResponse{Seconds: 5, Msg: "busy"}
	w, err := DecodeWaitResponse(wr.Append(nil))
	if err != nil || w != wr {
		t.Errorf("wait %+v %v", w, err)
	}
}

func TestStatusBody(t *testing.T) {
	info := be.AppendUint64(nil, 8192)
	b := AppendStatus(nil, StreamID{3, 4}, ReqPgRead, RespFinal, info, 4100)
	h, err := DecodeResponseHeader(b)
	if err != nil || h.Status != StatusStatus || h.Dlen != StatusBodyLen+8 || len(b) != 8+StatusBodyLen+8 {
		t.Fatalf("header %+v %v (%d bytes)", h, err, len(b))
	}
	s, gotInfo, err := DecodeStatus(b[8:])
	if err != nil || s.RequestID != ReqPgRead || s.RespType != RespFinal || s.Dlen != 4100 || s.StreamID != (StreamID{3, 4}) || !bytes.Equal(gotInfo, info) {
		t.Fatalf("status %+v %x %v", s, gotInfo, err)
	}
	b[len(b)-1] ^= 1
	if _, _, err := DecodeStatus(b[8:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("corrupted status body: %v", err)
	}
	cse := PgWriteErrors{FirstLen: 100, LastLen: 4096, Offsets: []int64{0, 4096}}
	got, err := DecodePgWriteErrors(cse.Append(nil))
	if err != nil || !reflect.DeepEqual(got, cse) {
		t.Errorf("pgwrite errors %+v %v", got, err)
	}
}

func TestCRC32C(t *testing.T) {
	if got := CRC32C([]byte("123456789")); got != 0xe3069283 {
		t.Errorf("CRC32C check value %08x", got)
	}
}

func TestPages(t *testing.T) {
	data := make([]byte, 3*PageSize+100)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, c := range []struct {
		off    int64
		n      int
		pieces int
	}{
		{0, 0, 0}, {0, 1, 1}, {0, PageSize, 1}, {0, PageSize + 1, 2}, {100, PageSize - 100, 1},
		{100, PageSize - 99, 2}, {5000, 8000, 3}, {4095, 2, 2}, {0, 3*PageSize + 100, 4},
	} {
		if got := PageCount(c.off, c.n); got != c.pieces {
			t.Errorf("PageCount(%d, %d) = %d, want %d", c.off, c.n, got, c.pieces)
		}
		wire := AppendPages(nil, c.off, data[:c.n])
		if len(wire) != PagedLen(c.off, c.n) {
			t.Errorf("(%d, %d): %d wire bytes, PagedLen %d", c.off, c.n, len(wire), PagedLen(c.off, c.n))
		}
		if n, err := PagedDataLen(c.off, len(wire)); err != nil || n != c.n {
			t.Errorf("PagedDataLen(%d, %d) = %d %v", c.off, len(wire), n, err)
		}
		back, bad, err := DecodePages(nil, c.off, wire)
		if err != nil || len(bad) > 0 || !bytes.Equal(back, data[:c.n]) {
			t.Errorf("(%d, %d): decode %d bytes, bad %v, %v", c.off, c.n, len(back), bad, err)
		}
		buf := make([]byte, PagedLen(c.off, c.n)+7)
		copy(buf[4*c.pieces:], data[:c.n])
		if got := PagesInPlace(buf, c.off, c.n); !bytes.Equal(got, wire) {
			t.Errorf("(%d, %d): PagesInPlace differs from AppendPages", c.off, c.n)
		}
		if len(PageCRCs(nil, c.off, data[:c.n])) != c.pieces {
			t.Errorf("PageCRCs count (%d, %d)", c.off, c.n)
		}
	}
	wire := AppendPages(nil, 5000, data[:8000])
	wire[4+3192+4+10] ^= 0xff // inside the second piece
	_, bad, err := DecodePages(nil, 5000, wire)
	if err != nil || !reflect.DeepEqual(bad, []int64{8192}) {
		t.Errorf("bad pieces %v %v", bad, err)
	}
	if _, _, err := DecodePages(nil, 0, []byte{1, 2, 3, 4}); err == nil {
		t.Error("a CRC without data accepted")
	}
	// In place, as the server takes a pgwrite apart in its request buffer.
	wire = AppendPages(nil, 100, data)
	got, bad, err := DecodePages(wire[:0], 100, wire)
	if err != nil || len(bad) > 0 || !bytes.Equal(got, data) {
		t.Errorf("in place: %d bytes, bad %v, %v", len(got), bad, err)
	}
}

func TestStatText(t *testing.T) {
	s := StatInfo{ID: "123", Size: 1 << 40, Flags: StatReadable | StatWritable, MTime: 1700000000,
		Extended: true, CTime: 1700000001, ATime: 1700000002, Mode: 0o644, Owner: "alice", Group: "cms"}
	if got := s.String(); got != "123 1099511627776 48 1700000000 1700000001 1700000002 0644 alice cms" {
		t.Errorf("stat line %q", got)
	}
	back, err := ParseStat(s.String() + "\x00")
	if err != nil || back != s {
		t.Errorf("parse %+v %v", back, err)
	}
	short, err := ParseStat("0 10 16 5")
	if err != nil || short.Size != 10 || short.Extended {
		t.Errorf("short stat %+v %v", short, err)
	}
	s.Checksum = "adler32:0a0b0c0d"
	back, err = ParseStat(s.String())
	if err != nil || back != s {
		t.Errorf("with checksum %+v %v", back, err)
	}
	for _, bad := range []string{"", "1 2 3", "1 x 0 0", "1 -5 0 0", "1 2 0 0 a b c d e"} {
		if _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
}

func TestDirlistText(t *testing.T) {
	st := StatInfo{ID: "1", Size: 5, Flags: StatReadable, MTime: 9}
	b := []byte(DirlistStatLead)
	b = AppendDirEntry(b, "a", &st)
	b = AppendDirEntry(b, "b c", &st)
	b[len(b)-1] = 0
	got, err := ParseDirlist(b)
	if err != nil || len(got) != 2 || got[1].Name != "b c" || *got[0].Stat != st {
		t.Fatalf("dirlist %+v %v", got, err)
	}
	plain := AppendDirEntry(AppendDirEntry(nil, "x", nil), "y", nil)
	plain[len(plain)-1] = 0
	got, err = ParseDirlist(plain)
	if err != nil || len(got) != 2 || got[0].Name != "x" || got[0].Stat != nil {
		t.Errorf("plain dirlist %+v %v", got, err)
	}
	if got, err := ParseDirlist([]byte(".\n0 0 0 0\n")); err != nil || len(got) != 0 {
		t.Errorf("empty dstat listing %+v %v", got, err)
	}
	if _, err := ParseDirlist([]byte(".\n0 0 0 0\na\n")); err == nil {
		t.Error("name without stat accepted")
	}
}

func TestLocationsAndChecksum(t *testing.T) {
	locs := []Location{{'S', 'r', "127.0.0.1:1094"}, {'M', 'w', "[::1]:1095"}}
	b := AppendLocations(nil, locs)
	if string(b) != "Sr127.0.0.1:1094 Mw[::1]:1095" {
		t.Errorf("locations %q", b)
	}
	got, err := ParseLocations(append(b, 0))
	if err != nil || !reflect.DeepEqual(got, locs) {
		t.Errorf("parse %+v %v", got, err)
	}
	if _, err := ParseLocations([]byte("Xr1:1")); err == nil {
		t.Error("bad kind accepted")
	}
	alg, v, err := ParseChecksum([]byte("adler32 0a0b0c0d\x00"))
	if err != nil || alg != "adler32" || v != "0a0b0c0d" {
		t.Errorf("checksum %q %q %v", alg, v, err)
	}
}

func TestNames(t *testing.T) {
	if ReqPgRead.String() != "kXR_pgread" || ReqAuth.String() != "kXR_auth" || ReqClone.String() != "kXR_clone" {
		t.Error("request names")
	}
	if RequestID(42).String() != "request 42" || RequestID(42).Known() {
		t.Error("unknown request")
	}
	if CodeTimerExpired.String() != "kXR_TimerExpired" || CodeNotFound.String() != "kXR_NotFound" || ErrorCode(1).String() != "error 1" {
		t.Error("error code names")
	}
	if StatusOKSoFar.String() != "kXR_oksofar" || Status(1).String() != "status 1" {
		t.Error("status names")
	}
	if p, c := SplitCGI("/a/b?x=1&y=2\x00"); p != "/a/b" || c != "x=1&y=2" {
		t.Errorf("SplitCGI %q %q", p, c)
	}
}

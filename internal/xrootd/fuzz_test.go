package xrootd

import (
	"bytes"
	"testing"
)

// FuzzRequest decodes arbitrary bytes as a request frame and every typed
// body and payload; nothing may panic, and what decodes re-encodes to the
// same bytes.
func FuzzRequest(f *testing.F) {
	f.Add(AppendRequest(nil, StreamID{0, 1}, ReqRead, ReadRequest{Handle: Handle{1}, Offset: 10, Length: 100}.Body(), ReadArgs{PathID: 1, PreRead: []Segment{{Handle{1}, 5, 6}}}.Append(nil)))
	f.Add(AppendRequest(nil, StreamID{0, 2}, ReqReadV, ReadVBody(0), AppendSegment(nil, Segment{Handle{1}, 4096, 0})))
	f.Add(AppendRequest(nil, StreamID{0, 3}, ReqOpen, OpenRequest{Options: OpenRead | OpenRetstat}.Body(), []byte("/store/f?x=1")))
	f.Add(AppendRequest(nil, StreamID{0, 4}, ReqMv, MvBody(2), []byte("/a /b")))
	f.Add(AppendRequest(nil, StreamID{0, 5}, ReqPgWrite, WriteRequest{Offset: 100}.Body(), AppendPages(nil, 100, make([]byte, 5000))))
	f.Add(AppendRequest(nil, StreamID{0, 6}, ReqLogin, LoginRequest{PID: 1, CapVer: 5}.Body(), []byte("xrd.cc=us")))
	f.Add(AppendHandshake(nil))
	f.Add(AppendRequest(nil, StreamID{0, 7}, ReqFattr, FattrRequest{Subcode: FattrSet, NumAttr: 2}.Body(),
		AppendFattrValues(AppendFattrNames([]byte("/store/f\x00"), []string{"a", "bb"}), [][]byte{[]byte("1"), nil})))
	f.Add(AppendRequest(nil, StreamID{0, 8}, ReqWriteV, WriteVBody(WriteVSync), AppendSegment(nil, Segment{Handle{1}, 3, 0})))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeRequestHeader(b)
		if err != nil {
			return
		}
		if got := h.Append(nil); !bytes.Equal(got, b[:RequestHeaderLen]) {
			t.Fatalf("header re-encodes to %x, was %x", got, b[:RequestHeaderLen])
		}
		_ = h.RequestID.String()
		data := b[RequestHeaderLen:]
		if int(h.Dlen) < len(data) {
			data = data[:h.Dlen]
		}
		checkBody(t, h.Body)
		if a, err := DecodeReadArgs(data); err == nil && len(data) >= 8 && len(data)%16 == 8 {
			if got := a.Append(nil); !bytes.Equal(got[8:], data[8:]) || got[0] != data[0] {
				t.Fatalf("read args re-encode to %x, was %x", got, data)
			}
		}
		if segs, err := DecodeSegments(data, 0); err == nil {
			var got []byte
			for _, s := range segs {
				got = AppendSegment(got, s)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("segments re-encode to %x, was %x", got, data)
			}
		}
		_ = DecodePgReadArgs(data)
		_, _, _ = SplitMv(DecodeMvArg1Len(h.Body), data)
		w := DecodeWrite(h.Body)
		if pd, bad, err := DecodePages(nil, w.Offset, data); err == nil {
			n, err := PagedDataLen(w.Offset, len(data))
			if err != nil || n != len(pd) {
				t.Fatalf("PagedDataLen %d %v, decoded %d", n, err, len(pd))
			}
			if len(bad) == 0 && !bytes.Equal(AppendPages(nil, w.Offset, pd), data) {
				t.Fatal("pages re-encode differently")
			}
		}
		_, _ = SplitCGI(string(data))
		fa := DecodeFattr(h.Body)
		_, args := SplitFattr(data)
		for _, values := range []bool{false, true} {
			names, vals, err := DecodeFattrArgs(args, int(fa.NumAttr), values)
			if err != nil {
				continue
			}
			re := AppendFattrNames(nil, names)
			if values {
				re = AppendFattrValues(re, vals)
			}
			if !bytes.Equal(re, args) {
				t.Fatalf("fattr arguments re-encode to %x, were %x", re, args)
			}
		}
	})
}

// checkBody decodes body as every request type and re-encodes it: the
// fields a type uses must come back unchanged.
func checkBody(t *testing.T, b [16]byte) {
	t.Helper()
	same := func(name string, got [16]byte, mask ...[2]int) {
		for _, m := range mask {
			if !bytes.Equal(got[m[0]:m[1]], b[m[0]:m[1]]) {
				t.Fatalf("%s body bytes %d:%d re-encode to %x, were %x", name, m[0], m[1], got[m[0]:m[1]], b[m[0]:m[1]])
			}
		}
	}
	same("protocol", DecodeProtocol(b).Body(), [2]int{0, 6})
	same("login", DecodeLogin(b).Body(), [2]int{0, 15})
	_ = DecodeLogin(b).User()
	same("auth", DecodeAuth(b).Body(), [2]int{12, 16})
	_ = DecodeAuth(b).Type()
	same("open", DecodeOpen(b).Body(), [2]int{0, 6}, [2]int{12, 16})
	same("read", DecodeRead(b).Body(), [2]int{0, 16})
	same("write", DecodeWrite(b).Body(), [2]int{0, 14})
	same("stat", DecodeStat(b).Body(), [2]int{0, 1}, [2]int{8, 16})
	same("mkdir", DecodeMkdir(b).Body(), [2]int{0, 1}, [2]int{14, 16})
	same("query", DecodeQuery(b).Body(), [2]int{0, 2}, [2]int{4, 8})
	same("prepare", DecodePrepare(b).Body(), [2]int{0, 6})
	same("session", DecodeSession(b).Body(), [2]int{0, 16})
	same("dirlist", DirlistBody(DecodeDirlist(b)), [2]int{15, 16})
	same("locate", LocateBody(DecodeLocate(b)), [2]int{0, 2})
	same("readv", ReadVBody(DecodeReadVPath(b)), [2]int{15, 16})
	same("chmod", ChmodBody(DecodeChmod(b)), [2]int{14, 16})
	same("handle", HandleBody(DecodeHandle(b)), [2]int{0, 4})
	same("fattr", DecodeFattr(b).Body(), [2]int{0, 7})
	same("writev", WriteVBody(DecodeWriteV(b)), [2]int{0, 1})
}

// FuzzResponse decodes arbitrary bytes as every response body.
func FuzzResponse(f *testing.F) {
	f.Add(AppendStatus(nil, StreamID{1, 1}, ReqPgRead, RespFinal, be.AppendUint64(nil, 0), 4100)[8:])
	f.Add(ErrorResponse{Code: CodeNotFound, Msg: "x"}.Append(nil))
	f.Add(OpenResponse{Handle: Handle{1}, Stat: "0 1 2 3"}.Append(nil))
	f.Add(PgWriteErrors{FirstLen: 1, LastLen: 2, Offsets: []int64{4096}}.Append(nil))
	f.Add(AppendServerHandshake(nil, 1))
	f.Add(AppendFattrStatus(nil, []string{"a", "b"}, []ErrorCode{0, CodeAttrNotFound}))
	f.Add(AppendFattrList(nil, []string{"a"}, [][]byte{[]byte("v")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeResponseHeader(b)
		_, _, _ = DecodeServerHandshake(b)
		_, _ = DecodeProtocolResponse(b)
		_, _ = DecodeLoginResponse(b)
		_, _ = DecodeOpenResponse(b)
		_, _ = DecodeErrorResponse(b)
		_, _ = DecodeRedirectResponse(b)
		_, _ = DecodeWaitResponse(b)
		if s, info, err := DecodeStatus(b); err == nil {
			re := AppendStatus(nil, s.StreamID, s.RequestID, s.RespType, info, s.Dlen)
			if !bytes.Equal(re[8+4:8+8], b[4:8]) || !bytes.Equal(re[8+12:], b[12:]) {
				t.Fatalf("status re-encodes to %x, was %x", re[8:], b)
			}
		}
		_, _ = DecodePgWriteErrors(b)
		_, _ = DecodeSegment(b)
		if names, codes, _, err := DecodeFattrStatus(b); err == nil {
			if re := AppendFattrStatus(nil, names, codes); !bytes.Equal(re, b[:len(re)]) {
				t.Fatalf("fattr status re-encodes to %x, was %x", re, b)
			}
		}
		if names, vals, err := DecodeFattrList(b); err == nil {
			if re := AppendFattrList(nil, names, vals); !bytes.Equal(re, b) {
				t.Fatalf("fattr list re-encodes to %x, was %x", re, b)
			}
		}
	})
}

// FuzzText parses arbitrary bytes as the text answers.
func FuzzText(f *testing.F) {
	f.Add([]byte("1 2 16 3 4 5 0644 a b [ adler32:01 ]"))
	f.Add([]byte(".\n0 0 0 0\na\n1 2 16 3\x00"))
	f.Add([]byte("Sr127.0.0.1:1094 Mw[::1]:1\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if st, err := ParseStat(string(b)); err == nil {
			if _, err := ParseStat(st.String()); err != nil {
				t.Fatalf("stat %q re-encodes to %q which fails: %v", b, st.String(), err)
			}
		}
		if ents, err := ParseDirlist(b); err == nil {
			for _, e := range ents {
				if e.Stat != nil {
					_ = e.Stat.String()
				}
			}
		}
		if locs, err := ParseLocations(b); err == nil {
			_ = AppendLocations(nil, locs)
		}
		_, _, _ = ParseChecksum(b)
	})
}

// FuzzPagesInPlace: the in-place paged form equals AppendPages's for any
// offset and data.
func FuzzPagesInPlace(f *testing.F) {
	f.Add(int64(0), make([]byte, 9000))
	f.Add(int64(5000), make([]byte, 8000))
	f.Add(int64(4095), []byte{1, 2})
	f.Fuzz(func(t *testing.T, off int64, data []byte) {
		if off < 0 {
			off = -off
		}
		if off < 0 {
			return
		}
		want := AppendPages(nil, off, data)
		buf := make([]byte, PagedLen(off, len(data)))
		copy(buf[4*PageCount(off, len(data)):], data)
		if got := PagesInPlace(buf, off, len(data)); !bytes.Equal(got, want) {
			t.Fatalf("off %d, %d bytes: in place differs", off, len(data))
		}
	})
}

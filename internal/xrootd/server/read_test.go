package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

func TestOpenReadInParts(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MaxReadSize = 1 << 20 })
	want := ts.writeFile(t, "a/f", 5<<20+123)
	rc := dialRaw(t, ts.addr).login()

	b := rc.mustOK(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead | xrootd.OpenRetstat}.Body(), []byte("/store/a/f?x=y"))
	o, err := xrootd.DecodeOpenResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	st, err := xrootd.ParseStat(o.Stat)
	if err != nil || st.Size != int64(len(want)) || st.Flags&xrootd.StatReadable == 0 || !st.Extended {
		t.Fatalf("retstat %q: %+v %v", o.Stat, st, err)
	}

	fs := rc.frames(rc.send(xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Offset: 0, Length: 8 << 20}.Body(), nil))
	if len(fs) != 6 {
		t.Errorf("%d frames, want 5 kXR_oksofar of 1 MiB and a final one", len(fs))
	}
	var got []byte
	for i, f := range fs {
		wantSt := xrootd.StatusOKSoFar
		if i == len(fs)-1 {
			wantSt = xrootd.StatusOK
		}
		if f.hdr.Status != wantSt || (i < len(fs)-1 && len(f.body) != 1<<20) {
			t.Errorf("frame %d: %v with %d bytes", i, f.hdr.Status, len(f.body))
		}
		got = append(got, f.body...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes that differ from the file (%d)", len(got), len(want))
	}

	// A read across the end is short; past the end empty.
	if b := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Offset: int64(len(want)) - 10, Length: 100}.Body(), nil); !bytes.Equal(b, want[len(want)-10:]) {
		t.Errorf("read at the end: %d bytes", len(b))
	}
	if b := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Offset: 1 << 40, Length: 100}.Body(), nil); len(b) != 0 {
		t.Errorf("read past the end: %d bytes", len(b))
	}
	// With read_args (path 0) as xrdcp sends them.
	args := xrootd.ReadArgs{}.Append(nil)
	if b := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Offset: 7, Length: 9}.Body(), args); !bytes.Equal(b, want[7:16]) {
		t.Errorf("read with read_args: %x", b)
	}
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Offset: 0, Length: -1}.Body(), nil)
	rc.mustFail(xrootd.CodeFileNotOpen, xrootd.ReqRead, xrootd.ReadRequest{Handle: xrootd.Handle{9, 9, 9, 9}, Length: 1}.Body(), nil)
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Length: 1}.Body(), xrootd.ReadArgs{PathID: 3}.Append(nil))

	// Stat of the handle, then close; the handle is gone.
	sb := rc.mustOK(xrootd.ReqStat, xrootd.StatRequest{Handle: o.Handle}.Body(), nil)
	if st, err := xrootd.ParseStat(string(sb)); err != nil || st.Size != int64(len(want)) {
		t.Errorf("stat of the handle %q: %v", sb, err)
	}
	rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(o.Handle), nil)
	rc.mustFail(xrootd.CodeFileNotOpen, xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Length: 1}.Body(), nil)
	rc.mustFail(xrootd.CodeFileNotOpen, xrootd.ReqClose, xrootd.HandleBody(o.Handle), nil)
}

// TestConcurrentStreams sends many reads at once on one connection and
// takes their interleaved frames apart by stream ID.
// Many reads in flight on one connection, large (answered by workers in
// parts) and small; with Options.Inline small ones may be answered on the
// reader goroutine between them.
func TestConcurrentStreams(t *testing.T) {
	for _, inl := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inl), func(t *testing.T) { testConcurrentStreams(t, inl) })
	}
}

func testConcurrentStreams(t *testing.T, inl bool) {
	ts := startServer(t, func(o *Options) { o.MaxReadSize = 64 << 10; o.Workers = 8; o.Inline = inl })
	want := ts.writeFile(t, "big", 3<<20)
	rc := dialRaw(t, ts.addr).login()
	h := rc.open("/store/big", xrootd.OpenRead)
	const n = 48
	type job struct{ off, len int64 }
	jobs := map[xrootd.StreamID]job{}
	for i := 0; i < n; i++ {
		j := job{int64(i) * 60000, 200000}
		if i%3 == 0 {
			j.len = 5000 // small: a quick request
		}
		jobs[rc.send(xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Offset: j.off, Length: int32(j.len)}.Body(), nil)] = j
	}
	got := map[xrootd.StreamID][]byte{}
	for done := 0; done < n; {
		f, err := rc.frame()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := jobs[f.hdr.StreamID]; !ok {
			t.Fatalf("frame for unknown stream %x", f.hdr.StreamID)
		}
		got[f.hdr.StreamID] = append(got[f.hdr.StreamID], f.body...)
		switch f.hdr.Status {
		case xrootd.StatusOK:
			done++
		case xrootd.StatusOKSoFar:
		default:
			t.Fatalf("status %v: %s", f.hdr.Status, errText(f.hdr.Status, f.body))
		}
	}
	for sid, j := range jobs {
		if !bytes.Equal(got[sid], want[j.off:j.off+j.len]) {
			t.Errorf("stream %x: %d bytes differ", sid, len(got[sid]))
		}
	}
}

func TestReadV(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MaxReadSize = 1 << 20 })
	a := ts.writeFile(t, "a", 3<<20)
	b := ts.writeFile(t, "b", 100<<10)
	rc := dialRaw(t, ts.addr).login()
	ha, hb := rc.open("/store/a", xrootd.OpenRead), rc.open("/store/b", xrootd.OpenRead)
	segs := []xrootd.Segment{
		{Handle: ha, Offset: 0, Length: 4096},
		{Handle: hb, Offset: 100, Length: 50},
		{Handle: ha, Offset: 1 << 20, Length: xrootd.MaxReadVData},
		{Handle: ha, Offset: 3<<20 - 10, Length: 10},
		{Handle: hb, Offset: 0, Length: 0},
		{Handle: ha, Offset: 2 << 20, Length: 64 << 10},
	}
	var list []byte
	for _, s := range segs {
		list = xrootd.AppendSegment(list, s)
	}
	fs := rc.frames(rc.send(xrootd.ReqReadV, xrootd.ReadVBody(0), list))
	if len(fs) < 2 {
		t.Errorf("%d frames; the answer exceeds a frame (2 MiB of data + a full read list's headers) and should come in parts", len(fs))
	}
	var all []byte
	for _, f := range fs {
		all = append(all, f.body...)
	}
	files := map[xrootd.Handle][]byte{ha: a, hb: b}
	for i, s := range segs {
		got, err := xrootd.DecodeSegment(all)
		if err != nil || got != s {
			t.Fatalf("segment %d header %+v %v, want %+v", i, got, err, s)
		}
		all = all[xrootd.SegmentLen:]
		if !bytes.Equal(all[:s.Length], files[s.Handle][s.Offset:s.Offset+int64(s.Length)]) {
			t.Fatalf("segment %d data differs", i)
		}
		all = all[s.Length:]
	}
	if len(all) != 0 {
		t.Errorf("%d bytes after the last segment", len(all))
	}
	past := xrootd.AppendSegment(nil, xrootd.Segment{Handle: hb, Offset: 100<<10 - 1, Length: 2})
	rc.mustFail(xrootd.CodeFSError, xrootd.ReqReadV, xrootd.ReadVBody(0), past)
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqReadV, xrootd.ReadVBody(0), past[:15])
	rc.mustFail(xrootd.CodeFileNotOpen, xrootd.ReqReadV, xrootd.ReadVBody(0), xrootd.AppendSegment(nil, xrootd.Segment{Handle: xrootd.Handle{7}, Length: 1}))
	rc.mustFail(xrootd.CodeNoMemory, xrootd.ReqReadV, xrootd.ReadVBody(0), xrootd.AppendSegment(nil, xrootd.Segment{Handle: ha, Length: xrootd.MaxReadVData + 1}))
}

func TestPgRead(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MaxReadSize = 64 << 10 })
	want := ts.writeFile(t, "p", 300<<10+17)
	rc := dialRaw(t, ts.addr).login()
	h := rc.open("/store/p", xrootd.OpenRead)
	for _, c := range []struct{ off, n int64 }{{0, 4096}, {5000, 200000}, {0, 1 << 30}, {300 << 10, 100}} {
		fs := rc.frames(rc.send(xrootd.ReqPgRead, xrootd.ReadRequest{Handle: h, Offset: c.off, Length: int32(c.n)}.Body(), []byte{0, 0}))
		var got []byte
		next := c.off
		for i, f := range fs {
			s, info, err := xrootd.DecodeStatus(f.body)
			if err != nil || s.RequestID != xrootd.ReqPgRead || len(info) != 8 {
				t.Fatalf("(%d,%d) frame %d: %+v %v", c.off, c.n, i, s, err)
			}
			off := int64(binary.BigEndian.Uint64(info))
			if off != next {
				t.Fatalf("(%d,%d) frame %d at %d, want %d", c.off, c.n, i, off, next)
			}
			if i > 0 && off%xrootd.PageSize != 0 {
				t.Errorf("frame %d starts mid-page at %d", i, off)
			}
			data, bad, err := xrootd.DecodePages(nil, off, f.data)
			if err != nil || len(bad) > 0 {
				t.Fatalf("frame %d pages: bad %v, %v", i, bad, err)
			}
			got = append(got, data...)
			next += int64(len(data))
		}
		end := min(c.off+c.n, int64(len(want)))
		if !bytes.Equal(got, want[c.off:end]) {
			t.Errorf("pgread (%d,%d): %d bytes differ", c.off, c.n, len(got))
		}
	}
	// At the end: one final frame without data.
	fs := rc.frames(rc.send(xrootd.ReqPgRead, xrootd.ReadRequest{Handle: h, Offset: 1 << 30, Length: 10}.Body(), nil))
	if len(fs) != 1 || len(fs[0].data) != 0 {
		t.Errorf("pgread past the end: %d frames", len(fs))
	}
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqPgRead, xrootd.ReadRequest{Handle: h, Length: 0}.Body(), nil)
}

func TestStatDirlistQuery(t *testing.T) {
	ts := startServer(t)
	f := ts.writeFile(t, "d/f", 1000)
	ts.writeFile(t, "d/g", 10)
	ts.writeFile(t, "d/sub/h", 1)
	rc := dialRaw(t, ts.addr).login()

	b := rc.mustOK(xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("/store/d/f"))
	if st, err := xrootd.ParseStat(string(b)); err != nil || st.Size != 1000 || st.Flags&xrootd.StatIsDir != 0 || b[len(b)-1] != 0 {
		t.Errorf("stat %q %v", b, err)
	}
	b = rc.mustOK(xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("/"))
	if st, err := xrootd.ParseStat(string(b)); err != nil || st.Flags&xrootd.StatIsDir == 0 {
		t.Errorf("stat of / (above the exports) %q %v", b, err)
	}
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("/store/nope"))
	rc.mustFail(xrootd.CodeNotFound, xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("/elsewhere"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("/store/../etc/passwd"))
	rc.mustOK(xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("store/d/f")) // xrdcp root://host/store/d/f
	rc.mustFail(xrootd.CodeArgMissing, xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte("?x=1"))

	b = rc.mustOK(xrootd.ReqStatx, [16]byte{}, []byte("/store/d\n/store/d/f"))
	if !bytes.Equal(b, []byte{byte(xrootd.StatIsDir), byte(xrootd.StatFile)}) {
		t.Errorf("statx %v", b)
	}

	b = rc.mustOK(xrootd.ReqDirlist, xrootd.DirlistBody(xrootd.DirlistDStat), []byte("/store/d"))
	ents, err := xrootd.ParseDirlist(b)
	if err != nil || len(ents) != 3 || ents[0].Name != "f" || ents[0].Stat.Size != 1000 || ents[2].Stat.Flags&xrootd.StatIsDir == 0 {
		t.Errorf("dirlist dstat %q: %+v %v", b, ents, err)
	}
	b = rc.mustOK(xrootd.ReqDirlist, xrootd.DirlistBody(0), []byte("/store/d"))
	if string(b) != "f\ng\nsub\x00" {
		t.Errorf("dirlist %q", b)
	}
	b = rc.mustOK(xrootd.ReqDirlist, xrootd.DirlistBody(xrootd.DirlistDStat), []byte("/"))
	if ents, err := xrootd.ParseDirlist(b); err != nil || len(ents) != 1 || ents[0].Name != "store" {
		t.Errorf("dirlist of / %q %v", b, err)
	}
	b = rc.mustOK(xrootd.ReqDirlist, xrootd.DirlistBody(xrootd.DirlistDStat), []byte("/store/d/sub/../sub"[:12]))
	if ents, err := xrootd.ParseDirlist(b); err != nil || len(ents) != 1 {
		t.Errorf("dirlist of an empty-ish dir %q %v", b, err)
	}
	rc.mustFail(xrootd.CodeFSError, xrootd.ReqDirlist, xrootd.DirlistBody(0), []byte("/store/d/f"))

	b = rc.mustOK(xrootd.ReqQuery, xrootd.QueryRequest{Type: xrootd.QueryChecksum}.Body(), []byte("/store/d/f"))
	if want := fmt.Sprintf("adler32 %08x\x00", adler32.Checksum(f)); string(b) != want {
		t.Errorf("checksum %q, want %q", b, want)
	}
	b = rc.mustOK(xrootd.ReqQuery, xrootd.QueryRequest{Type: xrootd.QueryChecksum}.Body(), []byte("/store/d/f?cks.type=md5"))
	if !strings.HasPrefix(string(b), "md5 ") {
		t.Errorf("md5 checksum %q", b)
	}
	rc.mustFail(xrootd.CodeServerError, xrootd.ReqQuery, xrootd.QueryRequest{Type: xrootd.QueryChecksum}.Body(), []byte("/store/d/f?cks.type=nope"))
	b = rc.mustOK(xrootd.ReqQuery, xrootd.QueryRequest{Type: xrootd.QueryConfig}.Body(), []byte("readv_iov_max chksum tpc tpcdlg"))
	// tpc: a digit > 0, a copy's source or destination (tpc.go); tpcdlg
	// itself: no delegation.
	if string(b) != "1024\n0:adler32,1:crc32c,2:md5\n1\ntpcdlg\n" {
		t.Errorf("query config %q", b)
	}
	b = rc.mustOK(xrootd.ReqLocate, xrootd.LocateBody(0), []byte("/store/d/f"))
	if locs, err := xrootd.ParseLocations(b); err != nil || len(locs) != 1 || locs[0].Addr != ts.addr || locs[0].Access != 'w' {
		t.Errorf("locate %q %v", b, err)
	}
	rc.mustOK(xrootd.ReqPing, [16]byte{}, nil)
	rc.mustFail(xrootd.CodeInvalidRequest, xrootd.RequestID(4242), [16]byte{}, nil)
	rc.mustFail(xrootd.CodeUnsupported, xrootd.ReqClone, [16]byte{}, nil)
}

func TestLoginRequired(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.Security = []string{"unix"} })
	rc := dialRaw(t, ts.addr)
	rc.mustOK(xrootd.ReqPing, [16]byte{}, nil)
	rc.mustFail(xrootd.CodeInvalidRequest, xrootd.ReqStat, [16]byte{}, []byte("/store"))
	b := rc.mustOK(xrootd.ReqLogin, xrootd.LoginRequest{CapVer: 5}.Body(), nil)
	if lr, err := xrootd.DecodeLoginResponse(b); err != nil || lr.Security != "&P=unix" {
		t.Fatalf("login answer %+v %v", lr, err)
	}
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqStat, [16]byte{}, []byte("/store"))
	rc.mustFail(xrootd.CodeNotAuthorized, xrootd.ReqAuth, xrootd.AuthRequest{CredType: [4]byte{'g', 's', 'i'}}.Body(), nil)
	rc.mustOK(xrootd.ReqAuth, xrootd.AuthRequest{CredType: [4]byte{'u', 'n', 'i', 'x'}}.Body(), []byte("unix\x00alice users\x00"))
	rc.mustOK(xrootd.ReqStat, [16]byte{}, []byte("/store"))
	rc.mustFail(xrootd.CodeInvalidRequest, xrootd.ReqLogin, xrootd.LoginRequest{}.Body(), nil)
}

// TestBind reads over a second connection bound to the session, as
// xrdcp --streams does: the request goes on the main connection, the
// answer comes on the bound one.
func TestBind(t *testing.T) {
	ts := startServer(t)
	want := ts.writeFile(t, "f", 1<<20)
	main := dialRaw(t, ts.addr).login()
	sub := dialRaw(t, ts.addr)
	sub.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion, Expect: xrootd.ExpectBind}.Body(), nil)
	b := sub.mustOK(xrootd.ReqBind, main.sess.Body(), nil)
	if len(b) != 1 || b[0] != 1 {
		t.Fatalf("bind answer %v, want path 1", b)
	}
	h := main.open("/store/f", xrootd.OpenRead)
	sid := main.send(xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Offset: 10, Length: 1000}.Body(), xrootd.ReadArgs{PathID: 1}.Append(nil))
	fs := sub.frames(sid)
	if len(fs) != 1 || !bytes.Equal(fs[0].body, want[10:1010]) {
		t.Fatalf("read on path 1: %d frames", len(fs))
	}
	sid = main.send(xrootd.ReqReadV, xrootd.ReadVBody(1), xrootd.AppendSegment(nil, xrootd.Segment{Handle: h, Offset: 5, Length: 5}))
	if fs := sub.frames(sid); len(fs) != 1 || !bytes.Equal(fs[0].body[16:], want[5:10]) {
		t.Fatalf("readv on path 1: %+v", fs)
	}
	sid = main.send(xrootd.ReqPgRead, xrootd.ReadRequest{Handle: h, Offset: 0, Length: 100}.Body(), []byte{1})
	if fs := sub.frames(sid); len(fs) != 1 || len(fs[0].data) != 104 {
		t.Fatalf("pgread on path 1: %+v", fs)
	}
	// Binding needs the same host and a live session; a session ends
	// with its main connection, and takes its paths along.
	dialRaw(t, ts.addr).mustFail(xrootd.CodeNotFound, xrootd.ReqBind, [16]byte{1, 2}, nil)
	main.c.Close()
	closedWithin(t, sub.c, 5*time.Second)
}

// TestLongDirlist: a listing larger than one part comes in kXR_oksofar
// parts that real clients put back together.
func TestLongDirlist(t *testing.T) {
	ts := startServer(t)
	const n = 3000
	for i := 0; i < n; i++ {
		ts.writeFile(t, fmt.Sprintf("many/file-with-a-longish-name-%05d", i), 1)
	}
	rc := dialRaw(t, ts.addr).login()
	for _, opt := range []byte{0, xrootd.DirlistDStat} {
		fs := rc.frames(rc.send(xrootd.ReqDirlist, xrootd.DirlistBody(opt), []byte("/store/many")))
		if len(fs) < 2 {
			t.Errorf("options %d: %d frames", opt, len(fs))
		}
		var all []byte
		for _, f := range fs {
			all = append(all, f.body...)
		}
		ents, err := xrootd.ParseDirlist(all)
		if err != nil || len(ents) != n || (opt != 0) != (ents[0].Stat != nil) {
			t.Fatalf("options %d: %d entries, %v", opt, len(ents), err)
		}
	}
	if _, err := lookTool("xrdfs"); err == nil {
		out := mustRun(t, "xrdfs", "root://"+ts.addr, "ls", "-l", "/store/many")
		if got := strings.Count(out, "file-with-a-longish-name-"); got != n {
			t.Errorf("xrdfs ls -l: %d entries, want %d", got, n)
		}
	}
}

// TestEndsess: a client that lost its connection ends the old session
// from a new one; the old session's uploads are gone before the answer.
func TestEndsess(t *testing.T) {
	ts := startServer(t)
	old := dialRaw(t, ts.addr).login()
	h := old.open("/store/e", xrootd.OpenNew)
	old.mustOK(xrootd.ReqWrite, xrootd.WriteRequest{Handle: h}.Body(), []byte("partial"))
	fresh := dialRaw(t, ts.addr).login()
	fresh.mustOK(xrootd.ReqEndsess, old.sess.Body(), nil)
	if !noUploadTemps(ts.dir) {
		t.Error("the old session's upload survived kXR_endsess")
	}
	closedWithin(t, old.c, 5*time.Second)
	fresh.mustOK(xrootd.ReqEndsess, old.sess.Body(), nil) // already gone: fine
	fresh.mustOK(xrootd.ReqPing, [16]byte{}, nil)
}

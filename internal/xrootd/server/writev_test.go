package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// sendWriteV sends a kXR_writev: the frame holds the list, the segments'
// bytes follow it.
func (rc *rawClient) sendWriteV(opts byte, segs []xrootd.Segment, data []byte) xrootd.StreamID {
	rc.t.Helper()
	var list []byte
	for _, s := range segs {
		list = xrootd.AppendSegment(list, s)
	}
	var sid xrootd.StreamID
	binary.BigEndian.PutUint16(sid[:], rc.next)
	rc.next++
	frame := append(xrootd.AppendRequest(nil, sid, xrootd.ReqWriteV, xrootd.WriteVBody(opts), list), data...)
	if _, err := rc.c.Write(frame); err != nil {
		rc.t.Fatalf("send kXR_writev: %v", err)
	}
	return sid
}

// writeV sends a kXR_writev and returns its final status and body.
func (rc *rawClient) writeV(segs []xrootd.Segment, data []byte) (xrootd.Status, []byte) {
	rc.t.Helper()
	fs := rc.frames(rc.sendWriteV(xrootd.WriteVSync, segs, data))
	return fs[len(fs)-1].hdr.Status, fs[len(fs)-1].body
}

// closed reports whether the server closed the connection (EOF, or a
// reset when it left bytes unread).
func (rc *rawClient) closed() bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := rc.c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestWriteV: one kXR_writev writes segments of several files (uploads
// and updates), each file still all or nothing at its close; the stream
// stays in step after a refused request.
func TestWriteV(t *testing.T) {
	ts := startServer(t)
	orig := ts.writeFile(t, "old", 100<<10)
	rc := dialRaw(t, ts.addr).login()
	up := rc.open("/store/new?oss.asize=30000", xrootd.OpenNew)
	upd := rc.open("/store/old", xrootd.OpenUpdate)
	seq := rc.open("/store/seq", xrootd.OpenNew)
	a, b, c := randomBytes(10000, 1), randomBytes(20000, 2), randomBytes(5000, 3)
	segs := []xrootd.Segment{
		{Handle: up, Length: 20000, Offset: 10000},
		{Handle: upd, Length: 5000, Offset: 50000},
		{Handle: up, Length: 10000, Offset: 0},
		{Handle: seq, Length: 5000, Offset: 0},
		{Handle: upd, Length: 0, Offset: 1}, // empty: skipped
	}
	data := slices.Concat(b, c, a, c)
	if st, body := rc.writeV(segs, data); st != xrootd.StatusOK {
		t.Fatalf("kXR_writev: %v %s", st, errText(st, body))
	}
	// Refused requests are read whole: the next one is answered.
	if st, body := rc.writeV([]xrootd.Segment{{Handle: xrootd.Handle{9, 9, 9, 9}, Length: 3}}, []byte("abc")); st != xrootd.StatusError || !bytes.Contains(body, []byte("writev does not refer to an open file")) {
		t.Errorf("writev to a handle not open: %v %s", st, errText(st, body))
	}
	ro := rc.open("/store/old", xrootd.OpenRead)
	if st, body := rc.writeV([]xrootd.Segment{{Handle: upd, Length: 1}, {Handle: ro, Length: 1}}, []byte("xy")); st != xrootd.StatusError {
		t.Errorf("writev to a handle open for reading: %v %s", st, errText(st, body))
	}
	rc.mustOK(xrootd.ReqPing, [16]byte{}, nil)
	for _, h := range []xrootd.Handle{up, upd, seq} {
		rc.mustOK(xrootd.ReqClose, xrootd.HandleBody(h), nil)
	}
	sameFile(t, filepath.Join(ts.dir, "new"), slices.Concat(a, b))
	sameFile(t, filepath.Join(ts.dir, "seq"), c)
	want := slices.Clone(orig)
	copy(want[50000:], c)
	sameFile(t, filepath.Join(ts.dir, "old"), want)

	// A segment that fails fails its file: the update stores nothing.
	upd = rc.open("/store/old", xrootd.OpenAppend)
	if st, _ := rc.writeV([]xrootd.Segment{{Handle: upd, Length: 3, Offset: 1 << 20}, {Handle: upd, Length: 3, Offset: 0}}, []byte("endbad")); st != xrootd.StatusError {
		t.Errorf("writev below an append's floor: %v", st)
	}
	rc.mustFail(xrootd.CodeArgInvalid, xrootd.ReqClose, xrootd.HandleBody(upd), nil)
	sameFile(t, filepath.Join(ts.dir, "old"), want)
	noTemps(t, ts.dir)
}

// TestWriteVHostile: lists that cannot be followed are refused and the
// connection closed (their data's end is unknown), without a stall.
func TestWriteVHostile(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MaxRequestData = 1 << 20 })
	for _, c := range []struct {
		name string
		code xrootd.ErrorCode
		list []byte
	}{
		{"partial segment", xrootd.CodeArgInvalid, make([]byte, 20)},
		{"too many segments", xrootd.CodeArgTooLong, make([]byte, (xrootd.MaxWriteVSegs+1)*xrootd.SegmentLen)},
		{"negative length", xrootd.CodeArgInvalid, xrootd.AppendSegment(nil, xrootd.Segment{Length: -1})},
		{"negative offset", xrootd.CodeArgInvalid, xrootd.AppendSegment(nil, xrootd.Segment{Length: 1, Offset: -5})},
		{"more data than a request holds", xrootd.CodeArgTooLong, xrootd.AppendSegment(xrootd.AppendSegment(nil, xrootd.Segment{Length: 1 << 19}), xrootd.Segment{Length: 1 << 19})},
		{"huge segment", xrootd.CodeArgTooLong, xrootd.AppendSegment(nil, xrootd.Segment{Length: 1<<31 - 1})},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := dialRaw(t, ts.addr).login()
			rc.open("/store/"+c.name, xrootd.OpenNew)
			var sid xrootd.StreamID
			binary.BigEndian.PutUint16(sid[:], 77)
			if _, err := rc.c.Write(xrootd.AppendRequest(nil, sid, xrootd.ReqWriteV, [16]byte{}, c.list)); err != nil {
				t.Fatal(err)
			}
			r, err := rc.frame()
			if err != nil || r.hdr.Status != xrootd.StatusError {
				t.Fatalf("answer %+v %v", r.hdr, err)
			}
			if e, _ := xrootd.DecodeErrorResponse(r.body); e.Code != c.code {
				t.Errorf("error %v %q, want %v", e.Code, e.Msg, c.code)
			}
			if !rc.closed() {
				t.Error("the connection stayed open")
			}
		})
	}
	waitFor(t, func() bool { return noUploadTemps(ts.dir) })
}

// A segment that fails fails the files of the segments after it too (they
// were not written): none of them is stored without its bytes.
func TestWriteVFailureFailsTheRest(t *testing.T) {
	ts := startServer(t)
	rc := dialRaw(t, ts.addr).login()
	a := rc.open("/store/a", xrootd.OpenNew) // streaming: no size announced
	b := rc.open("/store/b", xrootd.OpenNew)
	segs := []xrootd.Segment{
		{Handle: a, Length: 10, Offset: 0},
		{Handle: a, Length: 10, Offset: 0}, // rewrites bytes already streamed: refused
		{Handle: b, Length: 10, Offset: 0},
	}
	if st, _ := rc.writeV(segs, make([]byte, 30)); st != xrootd.StatusError {
		t.Fatalf("kXR_writev with a refused segment: %v", st)
	}
	st, body := rc.call(xrootd.ReqClose, xrootd.HandleBody(b), nil)
	if st != xrootd.StatusError {
		t.Fatalf("close of a file whose segment was never written: %v", st)
	}
	if !bytes.Contains(body, []byte("earlier segment")) {
		t.Errorf("close error %s", errText(st, body))
	}
	if _, err := os.Stat(filepath.Join(ts.dir, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b was stored: %v", err)
	}
}

package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/storage/posix"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// senderBackend is a POSIX export whose files send ranges themselves, as
// S3 files do (storage.RangeSender): the bytes go to the writer's
// ReadFrom from the file (sendfile here, splice from S3's socket there).
// cut > 0 makes a send fail after that many bytes.
type senderBackend struct {
	storage.Backend
	cut atomic.Int64
}

func (b *senderBackend) Open(ctx context.Context, name string) (storage.File, error) {
	f, err := b.Backend.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &senderFile{File: f, b: b}, nil
}

type senderFile struct {
	storage.File
	b *senderBackend
}

func (f *senderFile) CanSend(n int64) bool { return n >= 1<<20 }

func (f *senderFile) SendRange(ctx context.Context, w io.Writer, off, n int64) (int64, bool, error) {
	rf, ok := w.(io.ReaderFrom)
	if !ok || !f.CanSend(n) {
		return 0, false, nil
	}
	want := n
	if c := f.b.cut.Load(); c > 0 && c < n {
		want = c
	}
	sent, err := rf.ReadFrom(&io.LimitedReader{R: io.NewSectionReader(f.File, off, want), N: want})
	if err == nil && sent < n {
		err = errors.New("injected: the source broke off")
	}
	return sent, true, err
}

// TestSpliceFrames: a read of a file that sends its ranges itself goes in
// frames of MaxReadSize (kXR_oksofar, then kXR_ok) holding the file's
// bytes; a source that breaks off between two frames fails the read with
// a kXR_error on a connection that goes on, one that breaks off inside a
// frame closes the connection (never a short frame taken for a whole one).
func TestSpliceFrames(t *testing.T) {
	var sb *senderBackend
	ts := startServer(t, func(o *Options) {
		o.MaxReadSize = 1 << 20
		ex := o.Namespace.Exports()[0]
		sb = &senderBackend{Backend: ex.Backend}
		ns, err := storage.NewNamespace(storage.Export{Prefix: ex.Prefix, Backend: sb})
		if err != nil {
			t.Fatal(err)
		}
		o.Namespace = ns
	})
	if _, ok := sb.Backend.(*posix.Backend); !ok {
		t.Fatalf("export backend %T", sb.Backend)
	}
	want := ts.writeFile(t, "f", 5<<20+123)
	rc := dialRaw(t, ts.addr).login()
	o, err := xrootd.DecodeOpenResponse(rc.mustOK(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte("/store/f")))
	if err != nil {
		t.Fatal(err)
	}
	read := func(off, n int64) xrootd.StreamID {
		return rc.send(xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Offset: off, Length: int32(n)}.Body(), nil)
	}
	fs := rc.frames(read(3, 8<<20))
	var got []byte
	for i, f := range fs {
		st := xrootd.StatusOKSoFar
		if i == len(fs)-1 {
			st = xrootd.StatusOK
		}
		if f.hdr.Status != st || (i < len(fs)-1 && len(f.body) != 1<<20) {
			t.Errorf("frame %d: %v with %d bytes", i, f.hdr.Status, len(f.body))
		}
		got = append(got, f.body...)
	}
	if len(fs) != 6 || !bytes.Equal(got, want[3:]) {
		t.Fatalf("%d frames of %d bytes: want 6 holding the file's last %d", len(fs), len(got), len(want)-3)
	}

	// Broken off after two whole frames: a kXR_error after them.
	sb.cut.Store(2 << 20)
	fs = rc.frames(read(0, 4<<20))
	last := fs[len(fs)-1]
	if len(fs) != 3 || last.hdr.Status != xrootd.StatusError || !bytes.Equal(append(fs[0].body, fs[1].body...), want[:2<<20]) {
		t.Fatalf("a source broken off between frames: %d frames, the last %v", len(fs), last.hdr.Status)
	}
	sb.cut.Store(0)
	if b := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: o.Handle, Offset: 10, Length: 100}.Body(), nil); !bytes.Equal(b, want[10:110]) {
		t.Fatal("the connection does not go on after the error")
	}

	// Broken off inside a frame: the connection closes after what was
	// sent of it.
	sb.cut.Store(1<<20 + 1000)
	sid := read(0, 4<<20)
	var frames int
	for {
		r, err := rc.frame()
		if err != nil {
			break // closed: expected
		}
		if r.hdr.StreamID != sid || r.hdr.Status != xrootd.StatusOKSoFar {
			t.Fatalf("frame %v of stream %x after a source broke off inside a frame", r.hdr.Status, r.hdr.StreamID)
		}
		frames++
	}
	if frames != 1 {
		t.Errorf("%d whole frames before the connection closed, want 1", frames)
	}
}

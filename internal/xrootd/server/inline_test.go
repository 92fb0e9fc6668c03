package server

import (
	"testing"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// What the reader goroutine may answer itself (Options.Inline): never a
// request that copies, commits or reads much.
func TestQuickRequests(t *testing.T) {
	ss := &session{files: map[xrootd.Handle]*openFile{
		{0, 0, 0, 1}: {},             // open for reading (no writer)
		{0, 0, 0, 2}: {w: &writer{}}, // an upload or an update
	}}
	c := &conn{sess: ss}
	read := func(n int32) [16]byte { return xrootd.ReadRequest{Length: n}.Body() }
	open := func(o xrootd.OpenOptions) [16]byte { return xrootd.OpenRequest{Options: o}.Body() }
	for _, tc := range []struct {
		name string
		h    xrootd.RequestHeader
		want bool
	}{
		{"stat", xrootd.RequestHeader{RequestID: xrootd.ReqStat, Dlen: 20}, true},
		{"stat with a huge path", xrootd.RequestHeader{RequestID: xrootd.ReqStat, Dlen: smallRead + 1}, false},
		{"open to read", xrootd.RequestHeader{RequestID: xrootd.ReqOpen, Body: open(xrootd.OpenRead)}, true},
		{"open a new file", xrootd.RequestHeader{RequestID: xrootd.ReqOpen, Body: open(xrootd.OpenNew)}, true},
		{"open to update (a copy)", xrootd.RequestHeader{RequestID: xrootd.ReqOpen, Body: open(xrootd.OpenUpdate)}, false},
		{"open to append", xrootd.RequestHeader{RequestID: xrootd.ReqOpen, Body: open(xrootd.OpenAppend)}, false},
		{"close of a file read", xrootd.RequestHeader{RequestID: xrootd.ReqClose, Body: xrootd.HandleBody(xrootd.Handle{0, 0, 0, 1})}, true},
		{"close of an upload (commit)", xrootd.RequestHeader{RequestID: xrootd.ReqClose, Body: xrootd.HandleBody(xrootd.Handle{0, 0, 0, 2})}, false},
		{"close of no file", xrootd.RequestHeader{RequestID: xrootd.ReqClose, Body: xrootd.HandleBody(xrootd.Handle{0, 0, 0, 9})}, false},
		{"small read", xrootd.RequestHeader{RequestID: xrootd.ReqRead, Body: read(4096)}, true},
		{"large read", xrootd.RequestHeader{RequestID: xrootd.ReqRead, Body: read(8 << 20)}, false},
		{"write", xrootd.RequestHeader{RequestID: xrootd.ReqWrite, Dlen: 10}, false},
		{"checksum query", xrootd.RequestHeader{RequestID: xrootd.ReqQuery}, false},
		{"path truncate", xrootd.RequestHeader{RequestID: xrootd.ReqTruncate, Dlen: 10}, false},
		{"readv", xrootd.RequestHeader{RequestID: xrootd.ReqReadV, Dlen: 16}, false},
	} {
		if got := c.quick(tc.h); got != tc.want {
			t.Errorf("%s: quick = %v, want %v", tc.name, got, tc.want)
		}
	}
}

package xrdclient

import (
	"bytes"
	"fmt"
	"hash/adler32"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// A fresh copy over root:// asks nothing before its first kXR_open: the
// open's kXR_retstat tells the size, every stream opens and reads at
// once, and the checksum (kXR_stat, kXR_query) is asked beside the data.
// The scripted server holds its answers to kXR_stat and kXR_query until
// a kXR_read arrived: a copy that needed them first would never read.
func TestSetupNoStatBeforeData(t *testing.T) {
	data := randomBytes(6<<20+3, 21)
	sum := adler32.Checksum(data)
	read := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	held := false
	s := startFake(t, func(fc *fakeConn, h xrootd.RequestHeader, d []byte) error {
		switch h.RequestID {
		case xrootd.ReqOpen:
			return fc.ok(h.StreamID, xrootd.OpenResponse{Handle: xrootd.Handle{1}, Stat: fmt.Sprintf("1 %d 16 100", len(data))}.Append(nil))
		case xrootd.ReqRead:
			once.Do(func() { close(read) })
			r := xrootd.DecodeRead(h.Body)
			return fc.ok(h.StreamID, data[min(r.Offset, int64(len(data))):min(r.Offset+int64(r.Length), int64(len(data)))])
		case xrootd.ReqStat, xrootd.ReqQuery:
			select {
			case <-read:
			case <-time.After(10 * time.Second):
				mu.Lock()
				held = true
				mu.Unlock()
				return fc.fail(h.StreamID, xrootd.CodeServerError, "held: no kXR_read came")
			}
			if h.RequestID == xrootd.ReqStat {
				return fc.ok(h.StreamID, []byte(fmt.Sprintf("1 %d 16 100\x00", len(data))))
			}
			return fc.ok(h.StreamID, []byte(fmt.Sprintf("adler32 %08x\x00", sum)))
		}
		return fc.ok(h.StreamID)
	})
	for _, streams := range []int{0, 1, 4} {
		c, _ := newClient(t)
		dst := filepath.Join(t.TempDir(), "f")
		rs, err := c.Copy(testCtx(t), []string{s.URL("/data/f")}, dst, client.CopyOptions{Streams: streams, Checksum: "auto"})
		if err != nil {
			t.Fatalf("streams %d: %v (requests %v)", streams, err, s.requests())
		}
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("streams %d: destination differs (%v)", streams, err)
		}
		if !rs[0].Verified {
			t.Errorf("streams %d: %+v: not verified", streams, rs[0])
		}
		mu.Lock()
		if held {
			t.Errorf("streams %d: a stat or checksum question came before any read: %v", streams, s.requests())
		}
		mu.Unlock()
	}
	if reqs := s.requests(); len(reqs) == 0 || reqs[0] != "kXR_open /data/f" {
		t.Errorf("first request %v, want kXR_open", reqs)
	}
}

package cms

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzDecode feeds hostile frames to every decoder: they must return a
// value or an error, never panic, and never read past the frame.
func FuzzDecode(f *testing.F) {
	raw, _ := hex.DecodeString(loginFromCmsd)
	f.Add(raw)
	l := Load{CPU: 9, FreeMB: 3}
	f.Add(append(Header{Code: CodeLoad, DataLen: uint16(len(l.Data()))}.Append(nil), l.Data()...))
	p, _ := PathData("/store/x", true)
	f.Add(append(Header{StreamID: 5, Code: CodeHave, Modifier: ModRaw | HaveOnline, DataLen: uint16(len(p))}.Append(nil), p...))
	fw, _ := Forward{Code: CodeMv, Ident: "i", Path: "/a", Path2: "/b"}.Data()
	f.Add(append(Header{Code: CodeMv, DataLen: uint16(len(fw))}.Append(nil), fw...))
	f.Add([]byte{0, 0, 0, 0, 16, 0, 0, 7, 0, 6, 1, 2, 3, 4, 5, 6, 0xb0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ReadFrame(bytes.NewReader(b), nil, 0)
		if err != nil {
			return
		}
		if len(fr.Data) != int(fr.DataLen) {
			t.Fatalf("data %d, header says %d", len(fr.Data), fr.DataLen)
		}
		_, _ = ParseLogin(fr.Data)
		_, _ = ParsePath(fr.Header, fr.Data)
		_, _ = ParseLoad(fr.Data)
		_, _ = ParseAvail(fr.Data)
		_, _ = ParseTry(fr.Data)
		_, _ = ParseSelect(fr.Data)
		_, _ = ParsePrepare(fr.Header, fr.Data)
		if fw, err := ParseForward(fr.Header, fr.Data); err == nil && fw.Path == "" {
			t.Fatal("a forwarded operation without a path")
		}
		if r, err := ParseResponse(fr); err == nil {
			_ = r.Text()
		}
		if lg, err := ParseLogin(fr.Data); err == nil {
			_, _ = ParsePaths(lg.Paths)
			// What decodes packs again (when cmsd could pack it).
			if d, err := lg.Data(); err == nil {
				back, err := ParseLogin(d)
				if err != nil || back != lg {
					t.Fatalf("login round trip: %+v %v", back, err)
				}
			}
		}
	})
}

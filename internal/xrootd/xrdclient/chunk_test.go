package xrdclient

import "testing"

// TestChunkShared: the readers open at once share ReadMemory; a reader
// alone gets ReadChunk, many get no less than 1 MiB.
func TestChunkShared(t *testing.T) {
	tr := New(Options{})
	for _, tc := range []struct {
		readers int32
		want    int
	}{{0, 4 << 20}, {1, 4 << 20}, {4, 4 << 20}, {8, 2 << 20}, {16, 1 << 20}, {100, 1 << 20}} {
		tr.readers.Store(tc.readers)
		if got := tr.chunk(); got != tc.want {
			t.Errorf("%d readers: chunk %d, want %d", tc.readers, got, tc.want)
		}
	}
	small := New(Options{ReadChunk: 64 << 10})
	small.readers.Store(100)
	if got := small.chunk(); got != 64<<10 {
		t.Errorf("ReadChunk 64 KiB, 100 readers: chunk %d", got)
	}
}

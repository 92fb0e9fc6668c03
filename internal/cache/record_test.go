package cache

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

const testBS = 64 << 10

func testRecord(path string, size int64) record {
	n := nblocks(size, testBS)
	return record{
		Version: recordVersion, Path: path, Size: size, ETag: `"abc-123"`,
		ModTime: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), BlockSize: testBS,
		Have: make([]uint64, (n+63)/64), Sums: make([]uint32, n),
		Validated: time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC), Accessed: time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC), Hits: 7,
	}
}

func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := testRecord("/data/x y/ü.root", 130*testBS+5) // > 2 bitmap words
	for _, b := range []int{0, 63, 64, 129, 130} {
		setBit(r.Have, b)
		r.Sums[b] = uint32(b)*2654435761 + 1
	}
	p := filepath.Join(dir, "r.json")
	if err := r.save(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
	got, err := loadRecord(p)
	if err != nil {
		t.Fatal(err)
	}
	if !got.ModTime.Equal(r.ModTime) || !got.Validated.Equal(r.Validated) || !got.Accessed.Equal(r.Accessed) {
		t.Errorf("times: got %v %v %v, want %v %v %v", got.ModTime, got.Validated, got.Accessed, r.ModTime, r.Validated, r.Accessed)
	}
	got.ModTime, got.Validated, got.Accessed = r.ModTime, r.Validated, r.Accessed
	if !reflect.DeepEqual(*got, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", *got, r)
	}
	for b := range r.Sums {
		want := b == 0 || b == 63 || b == 64 || b == 129 || b == 130
		if bit(got.Have, b) != want {
			t.Errorf("block %d: have %v, want %v", b, bit(got.Have, b), want)
		}
	}

	// Saving again replaces the file.
	r.Hits = 8
	clearBit(r.Have, 63)
	if err := r.save(p); err != nil {
		t.Fatal(err)
	}
	if got, err := loadRecord(p); err != nil || got.Hits != 8 || bit(got.Have, 63) {
		t.Errorf("after a second save: %+v, %v", got, err)
	}

	if got, err := loadRecord(filepath.Join(dir, "missing.json")); got != nil || err != nil {
		t.Errorf("a missing record: %v, %v; want nil, nil", got, err)
	}
}

func TestLoadRecordRefusesBadRecords(t *testing.T) {
	good := testRecord("/data/f", 3*testBS)
	for _, tc := range []struct {
		name string
		edit func(r *record)
		raw  string
	}{
		{name: "not json", raw: "{not json"},
		{name: "truncated", raw: `{"version":1,"path":"/data/f","size":`},
		{name: "empty", raw: ""},
		{name: "other version", edit: func(r *record) { r.Version = recordVersion + 1 }},
		{name: "no block size", edit: func(r *record) { r.BlockSize = 0 }},
		{name: "negative size", edit: func(r *record) { r.Size = -1 }},
		{name: "sums short", edit: func(r *record) { r.Sums = r.Sums[:2] }},
		{name: "bitmap long", edit: func(r *record) { r.Have = append(r.Have, 0) }},
		{name: "size grew", edit: func(r *record) { r.Size = 100 * testBS }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "r.json")
			if tc.edit != nil {
				r := good
				r.Have = append([]uint64(nil), good.Have...)
				r.Sums = append([]uint32(nil), good.Sums...)
				tc.edit(&r)
				if err := r.save(p); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(p, []byte(tc.raw), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := loadRecord(p); err == nil {
				t.Errorf("loaded %+v", got)
			}
		})
	}
}

// deadUpstream is an upstream that accepts connections and closes them at
// once: nothing can be asked of it.
func deadUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String()
}

// writeCached puts a record and its data file for logical in dir, with
// the blocks listed present (their checksums right).
func writeCached(t *testing.T, dir, logical string, data []byte, blocks ...int) (dataPath, recPath string) {
	t.Helper()
	dp, rp := names(dir, logical)
	if err := os.MkdirAll(filepath.Dir(dp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := testRecord(logical, int64(len(data)))
	for _, b := range blocks {
		setBit(r.Have, b)
		end := min(int64(b+1)*testBS, int64(len(data)))
		r.Sums[b] = crc32.Checksum(data[int64(b)*testBS:end], castagnoli)
	}
	if err := r.save(rp); err != nil {
		t.Fatal(err)
	}
	return dp, rp
}

// TestLoadDropsBadRecords opens a cache directory holding one good cached
// file and bad ones of every kind: the good one comes back and is served
// from disk; the bad ones are removed with their data.
func TestLoadDropsBadRecords(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 3*testBS+1)
	for i := range data {
		data[i] = byte(i * 31)
	}
	goodData, goodRec := writeCached(t, dir, "/data/good", data, 0, 3)

	var gone []string
	add := func(p ...string) { gone = append(gone, p...) }
	// Not JSON.
	dp, rp := writeCached(t, dir, "/data/garbled", data, 0)
	if err := os.WriteFile(rp, []byte("{\"version\":1,"), 0o644); err != nil {
		t.Fatal(err)
	}
	add(dp, rp)
	// A record of another path under this one's name.
	dp, rp = writeCached(t, dir, "/data/misplaced", data, 0)
	other := testRecord("/data/other", int64(len(data)))
	if err := other.save(rp); err != nil {
		t.Fatal(err)
	}
	add(dp, rp)
	// Another block size.
	dp, rp = writeCached(t, dir, "/data/bs", data, 0)
	r, err := loadRecord(rp)
	if err != nil {
		t.Fatal(err)
	}
	r.BlockSize = 2 * testBS
	r.Sums = r.Sums[:nblocks(r.Size, r.BlockSize)]
	if err := r.save(rp); err != nil {
		t.Fatal(err)
	}
	add(dp, rp)
	// A data file of another size than the record says.
	dp, rp = writeCached(t, dir, "/data/short", data, 0)
	if err := os.Truncate(dp, testBS); err != nil {
		t.Fatal(err)
	}
	add(dp, rp)
	// No data file.
	dp, rp = writeCached(t, dir, "/data/nodata", data, 0)
	if err := os.Remove(dp); err != nil {
		t.Fatal(err)
	}
	add(rp)
	// An unfinished save.
	_, rp = names(dir, "/data/tmp")
	if err := os.MkdirAll(filepath.Dir(rp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rp+".tmp", []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	add(rp + ".tmp")
	// An upload a killed cache was passing through.
	staged := filepath.Join(dir, "uploads", "up-123")
	if err := os.MkdirAll(filepath.Dir(staged), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(staged, []byte("partial upload"), 0o644); err != nil {
		t.Fatal(err)
	}
	add(staged)

	cl := client.New()
	cl.Policy = client.Policy{Attempts: 1}
	c, err := New(Options{Upstream: deadUpstream(t), Dir: dir, MaxSize: 1 << 30, BlockSize: testBS,
		HighWatermark: 0.95, LowWatermark: 0.9, StaleIfError: true, Revalidate: time.Hour, Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.Stats()
	if s.Files != 1 || s.UsedBytes != testBS+1 {
		t.Errorf("loaded %d files, %d bytes; want 1 file, %d bytes (blocks 0 and 3 of /data/good)", s.Files, s.UsedBytes, testBS+1)
	}
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: still there after the load (%v)", strings.TrimPrefix(p, dir), err)
		}
	}
	for _, p := range []string{goodData, goodRec} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the good file's %s: %v", filepath.Base(p), err)
		}
	}
	in, local, ok := c.Has("/data/good")
	if !ok || local != goodData || in.Size != int64(len(data)) || in.ETag != `"abc-123"` {
		t.Errorf("Has(/data/good) = %+v, %q, %v", in, local, ok)
	}

	// The good file is served from its blocks with the upstream dead
	// (fresh record: no revalidation), checksums checked on the way.
	f, err := c.Backend().Open(context.Background(), "data/good")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, testBS)
	if n, err := f.ReadAt(buf, 0); n != testBS || err != nil || string(buf) != string(data[:testBS]) {
		t.Errorf("block 0: %d bytes, %v, equal %v", n, err, string(buf) == string(data[:testBS]))
	}
	if n, err := f.ReadAt(buf, 3*testBS); n != 1 || err != io.EOF || buf[0] != data[3*testBS] {
		t.Errorf("block 3 (1 byte): %d bytes, %v", n, err)
	}
	// A block not cached needs the dead upstream: an upstream error.
	if _, err := f.ReadAt(buf, testBS); err == nil {
		t.Error("an uncached block was read with the upstream dead")
	} else if !isUpstreamErr(err) {
		t.Errorf("an uncached block, upstream dead: %v, want an upstream error", err)
	}
	if s := c.Stats(); s.CorruptBlocks != 0 || s.FetchedBytes != 0 {
		t.Errorf("corrupt %v, fetched %v", s.CorruptBlocks, s.FetchedBytes)
	}
}

func isUpstreamErr(err error) bool {
	return errors.Is(err, storage.ErrUpstream) || errors.Is(err, storage.ErrUpstreamTimeout)
}

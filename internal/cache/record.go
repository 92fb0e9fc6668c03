package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// recordVersion names the on-disk format of a file's record.
const recordVersion = 1

// record is what survives a restart about one cached file: which blocks
// are on disk, their checksums, and the upstream version they belong to.
// It lives beside the sparse data file as NAME.json, written atomically
// (temporary file, fsync, rename). A record may lag its data file (blocks
// written after the last save are fetched again); it never claims a block
// whose bytes were not written first.
type record struct {
	Version   int       `json:"version"`
	Path      string    `json:"path"` // logical
	Size      int64     `json:"size"`
	ETag      string    `json:"etag,omitempty"`
	ModTime   time.Time `json:"mtime"`
	BlockSize int64     `json:"block_size"`
	// Have is the block bitmap (bit i of word i/64); Sums the CRC-32C of
	// every block present (0 for the others).
	Have []uint64 `json:"have"`
	Sums []uint32 `json:"sums"`
	// Validated is when the upstream last confirmed this version.
	Validated time.Time `json:"validated"`
	// Access statistics.
	Accessed time.Time `json:"accessed"`
	Hits     int64     `json:"hits"`
}

// names returns the data and record file names of a logical path: a hash,
// so that any logical name maps to a safe, flat, bounded file name.
func names(dir, logical string) (data, rec string) {
	h := sha256.Sum256([]byte(logical))
	x := hex.EncodeToString(h[:16])
	base := filepath.Join(dir, x[:2], x)
	return base + ".data", base + ".json"
}

// loadRecord reads a record; a missing one is (nil, nil).
func loadRecord(p string) (*record, error) {
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("record %s: %w", p, err)
	}
	if r.Version != recordVersion || r.BlockSize <= 0 || r.Size < 0 {
		return nil, fmt.Errorf("record %s: version %d, block size %d: not this cache's", p, r.Version, r.BlockSize)
	}
	n := nblocks(r.Size, r.BlockSize)
	if len(r.Sums) != n || len(r.Have) != (n+63)/64 {
		return nil, fmt.Errorf("record %s: %d sums and %d bitmap words for %d blocks", p, len(r.Sums), len(r.Have), n)
	}
	return &r, nil
}

// save writes the record atomically.
func (r *record) save(p string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
}

func nblocks(size, bs int64) int {
	return int((size + bs - 1) / bs)
}

func bit(words []uint64, i int) bool { return words[i/64]&(1<<(uint(i)%64)) != 0 }
func setBit(words []uint64, i int)   { words[i/64] |= 1 << (uint(i) % 64) }
func clearBit(words []uint64, i int) { words[i/64] &^= 1 << (uint(i) % 64) }

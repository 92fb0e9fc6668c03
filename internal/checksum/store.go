package checksum

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FileStamp identifies one version of a file: a cached checksum is valid only
// while the stamp is unchanged.
type FileStamp struct {
	Size    int64
	MtimeNs int64
	Inode   uint64
}

// Stamp takes the stamp of a file.
func Stamp(fi fs.FileInfo) FileStamp {
	s := FileStamp{Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.Inode = st.Ino
	}
	return s
}

// Store caches checksums of open files. Implementations take the open file
// (so xattrs are read and written on the descriptor, never on a path that
// could have been swapped) and the logical name (for sidecar keys).
type Store interface {
	Get(f *os.File, name, alg string, stamp FileStamp) ([]byte, bool)
	Put(f *os.File, name, alg string, stamp FileStamp, sum []byte) error
}

// XattrStore keeps checksums in user.XrdCks.<alg> attributes, with XRootD's
// XrdCksData layout: name[16], fmTime int64 BE (file mtime, seconds), csTime
// int32 BE, 3 reserved bytes, length, value[64]. Like XRootD it treats a
// record as stale when fmTime differs from the file's mtime; wanda also
// refuses one whose length does not fit the algorithm. Where the filesystem
// refuses user xattrs it falls back to Fallback.
type XattrStore struct {
	Fallback Store
}

const xattrPrefix = "user.XrdCks."
const cksDataSize = 16 + 8 + 4 + 2 + 1 + 1 + 64

// Get reads a record.
func (s *XattrStore) Get(f *os.File, name, alg string, stamp FileStamp) ([]byte, bool) {
	buf := make([]byte, cksDataSize)
	n, err := unix.Fgetxattr(int(f.Fd()), xattrPrefix+alg, buf)
	if err != nil {
		// ENODATA too: where Put fell back (the filesystem, or this file,
		// refuses user xattrs) there is no attribute, and the record is in
		// the fallback.
		if (noXattr(err) || errors.Is(err, unix.ENODATA)) && s.Fallback != nil {
			return s.Fallback.Get(f, name, alg, stamp)
		}
		return nil, false
	}
	sum, fmTime, ok := decodeCksData(buf[:n], alg)
	if !ok || fmTime != stamp.MtimeNs/1e9 {
		return nil, false
	}
	// XRootD's record knows the mtime to the second only. When wanda wrote
	// it, a precise stamp sits beside it: a file rewritten in place within
	// the same second (same fmTime) is caught by size, ns mtime or inode.
	// A record written by XRootD has no (or an older) stamp: then a stamp
	// that disagrees only costs a recomputation.
	var sb [24]byte
	if m, err := unix.Fgetxattr(int(f.Fd()), stampPrefix+alg, sb[:]); err == nil {
		if m != len(sb) || decodeStamp(sb[:]) != stamp {
			return nil, false
		}
	}
	return sum, true
}

// Put writes a record.
func (s *XattrStore) Put(f *os.File, name, alg string, stamp FileStamp, sum []byte) error {
	err := unix.Fsetxattr(int(f.Fd()), xattrPrefix+alg, encodeCksData(alg, stamp, sum), 0)
	if err != nil && noXattr(err) && s.Fallback != nil {
		return s.Fallback.Put(f, name, alg, stamp, sum)
	}
	if err != nil {
		return err
	}
	return unix.Fsetxattr(int(f.Fd()), stampPrefix+alg, encodeStamp(stamp), 0)
}

// stampPrefix names wanda's precise companion of an XrdCks record.
const stampPrefix = "user.wanda.cks."

func encodeStamp(s FileStamp) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b[0:], uint64(s.Size))
	binary.BigEndian.PutUint64(b[8:], uint64(s.MtimeNs))
	binary.BigEndian.PutUint64(b[16:], s.Inode)
	return b
}

func decodeStamp(b []byte) FileStamp {
	return FileStamp{
		Size:    int64(binary.BigEndian.Uint64(b[0:])),
		MtimeNs: int64(binary.BigEndian.Uint64(b[8:])),
		Inode:   binary.BigEndian.Uint64(b[16:]),
	}
}

func noXattr(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

func encodeCksData(alg string, stamp FileStamp, sum []byte) []byte {
	b := make([]byte, cksDataSize)
	copy(b[:15], alg)
	binary.BigEndian.PutUint64(b[16:], uint64(stamp.MtimeNs/1e9))
	// csTime: seconds between the file's mtime and the computation; 0 is
	// what XRootD writes when it computes right after a write, and nothing
	// reads it for validity.
	b[31] = byte(len(sum))
	copy(b[32:], sum)
	return b
}

func decodeCksData(b []byte, alg string) (sum []byte, fmTime int64, ok bool) {
	if len(b) < 32 {
		return nil, 0, false
	}
	n := int(b[31])
	want := digestSize[alg]
	if n != want || 32+n > len(b) {
		return nil, 0, false
	}
	nameEnd := 0
	for nameEnd < 16 && b[nameEnd] != 0 {
		nameEnd++
	}
	if string(b[:nameEnd]) != alg {
		return nil, 0, false
	}
	return append([]byte(nil), b[32:32+n]...), int64(binary.BigEndian.Uint64(b[16:24])), true
}

// SidecarStore keeps records as small JSON files in a directory of its own,
// keyed by a hash of the logical name and algorithm, and validated against
// the full stamp (size, mtime in ns, inode).
type SidecarStore struct {
	Dir string
}

type sidecarRecord struct {
	Stamp FileStamp `json:"stamp"`
	Sum   string    `json:"sum"`
}

func (s *SidecarStore) path(name, alg string) string {
	h := sha256.Sum256([]byte(name + "\x00" + alg))
	k := hex.EncodeToString(h[:])
	return filepath.Join(s.Dir, k[:2], k[2:])
}

// Get reads a record.
func (s *SidecarStore) Get(_ *os.File, name, alg string, stamp FileStamp) ([]byte, bool) {
	b, err := os.ReadFile(s.path(name, alg))
	if err != nil {
		return nil, false
	}
	var r sidecarRecord
	if json.Unmarshal(b, &r) != nil || r.Stamp != stamp {
		return nil, false
	}
	sum, err := hex.DecodeString(r.Sum)
	return sum, err == nil
}

// Put writes a record atomically (temp file + rename).
func (s *SidecarStore) Put(_ *os.File, name, alg string, stamp FileStamp, sum []byte) error {
	p := s.path(name, alg)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(sidecarRecord{stamp, hex.EncodeToString(sum)})
	tmp, err := os.CreateTemp(filepath.Dir(p), sidecarTemp+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// sidecarTemp starts the names of Put's temp files.
const sidecarTemp = ".tmp-"

// RemoveStaleTemps removes the temp files of Puts that a killed process
// left behind: those not modified for olderThan (a Put holds its temp
// file for the time of one small write, so any age well above that is
// safe). It returns how many files and bytes went, and the first error
// met (the walk goes on past errors).
func (s *SidecarStore) RemoveStaleTemps(olderThan time.Duration) (n int, bytes int64, err error) {
	var first error
	walkErr := filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if first == nil && !errors.Is(err, fs.ErrNotExist) {
				first = err
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), sidecarTemp) {
			return nil
		}
		fi, err := d.Info()
		if err != nil || time.Since(fi.ModTime()) < olderThan {
			return nil
		}
		if err := os.Remove(p); err != nil {
			if first == nil && !errors.Is(err, fs.ErrNotExist) {
				first = err
			}
			return nil
		}
		n++
		bytes += fi.Size()
		return nil
	})
	if first == nil {
		first = walkErr
	}
	return n, bytes, first
}

// MemoryStore keeps records in memory, at most Max of them (oldest dropped
// wholesale when full: a cache, not a database).
type MemoryStore struct {
	Max int
	mu  sync.Mutex
	m   map[string]memRecord
}

type memRecord struct {
	stamp FileStamp
	sum   []byte
}

// Get reads a record.
func (s *MemoryStore) Get(_ *os.File, name, alg string, stamp FileStamp) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[name+"\x00"+alg]
	if !ok || r.stamp != stamp {
		return nil, false
	}
	return r.sum, true
}

// Put writes a record.
func (s *MemoryStore) Put(_ *os.File, name, alg string, stamp FileStamp, sum []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.Max
	if limit <= 0 {
		limit = 100000
	}
	if s.m == nil || len(s.m) >= limit {
		s.m = make(map[string]memRecord)
	}
	s.m[name+"\x00"+alg] = memRecord{stamp, append([]byte(nil), sum...)}
	return nil
}

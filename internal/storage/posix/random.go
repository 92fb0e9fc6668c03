package posix

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
)

var _ storage.RandomUploader = (*Backend)(nil)

// CreateRandom starts an upload of exactly size bytes to name, written with
// pwrite(2) at any offsets. It is the same hidden temp file as Create's
// (same name prefix, hidden from listings, removed on Abort), sized up
// front with ftruncate(2) so that holes read as zeros until written, and
// committed by the same fsync and rename (or link, for NoReplace).
func (b *Backend) CreateRandom(_ context.Context, name string, size int64, opts storage.CreateOptions) (storage.RandomUpload, error) {
	if size < 0 {
		return nil, fmt.Errorf("create %q: negative size %d: %w", name, size, storage.ErrBadPath)
	}
	opts.Size = size
	f, tmp, l, err := b.createTemp(name, opts, os.O_RDWR) // Checksums reads back
	if err != nil {
		return nil, err
	}
	u := &upload{b: b, f: f, tmp: tmp, lease: l, name: name, opts: opts, wb: &writeback{f: f}}
	if err := f.Truncate(size); err != nil {
		u.Abort()
		return nil, mapErr("create", name, err)
	}
	return &randomUpload{u: u, size: size}, nil
}

// randomUpload reuses upload for its file, names and commit; Write and
// ReadFrom are not offered, so the byte count upload checks is unused.
type randomUpload struct {
	u    *upload
	size int64
	sums map[string][]byte // on-write algorithms, from Checksums
}

func (r *randomUpload) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off > r.size || int64(len(p)) > r.size-off {
		return 0, fmt.Errorf("write %q: %d bytes at %d beyond the upload's size %d", r.u.name, len(p), off, r.size)
	}
	if r.u.done {
		return 0, fmt.Errorf("write %q: upload already finished", r.u.name)
	}
	n, err := r.u.f.WriteAt(p, off)
	r.u.wb.wrote(n)
	if err != nil {
		return n, mapErr("write", r.u.name, err)
	}
	return n, nil
}

func (r *randomUpload) ReadAt(p []byte, off int64) (int, error) {
	if r.u.done {
		return 0, fmt.Errorf("read %q: upload already finished", r.u.name)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	return r.u.f.ReadAt(p, off)
}

// Checksums reads the file once for algs and the backend's on-write
// algorithms; the latter are kept for Commit to store.
func (r *randomUpload) Checksums(ctx context.Context, algs []string) (map[string][]byte, error) {
	if r.u.done {
		return nil, fmt.Errorf("checksum %q: upload already finished", r.u.name)
	}
	for _, a := range algs {
		if checksum.Canonical(a) == "" {
			return nil, fmt.Errorf("checksum %q: unknown algorithm %q: %w", r.u.name, a, storage.ErrUnsupported)
		}
	}
	all := slices.Concat(algs, r.u.b.opts.OnWrite)
	m := checksum.NewMulti(all)
	if err := checksum.Feed(ctx, m, io.NewSectionReader(r.u.f, 0, r.size)); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, mapErr("checksum", r.u.name, err)
	}
	sums := m.Sums()
	r.sums = map[string][]byte{}
	for _, a := range r.u.b.opts.OnWrite {
		if c := checksum.Canonical(a); sums[c] != nil {
			r.sums[c] = sums[c]
		}
	}
	out := map[string][]byte{}
	for _, a := range algs {
		c := checksum.Canonical(a)
		out[c] = sums[c]
	}
	return out, nil
}

// Commit publishes the file; checksums computed by Checksums are stored
// with it (without that call, they are computed when first asked for).
func (r *randomUpload) Commit(ctx context.Context) (storage.FileInfo, error) {
	if r.u.done {
		return storage.FileInfo{}, fmt.Errorf("commit %q: upload already finished", r.u.name)
	}
	return r.u.publish(ctx, r.sums)
}

func (r *randomUpload) Abort() error { return r.u.Abort() }

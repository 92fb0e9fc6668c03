package s3

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
)

// metaPrefix names the metadata holding a checksum: x-amz-meta-wanda-ALG,
// its value the checksum in hex.
const metaPrefix = "Wanda-"

func metaKey(alg string) string { return metaPrefix + strings.ToUpper(alg[:1]) + alg[1:] }

// metaSum returns the checksum alg stored in the object's metadata.
func metaSum(oi minio.ObjectInfo, alg string) ([]byte, bool) {
	for k, v := range oi.UserMetadata {
		if strings.EqualFold(k, metaKey(alg)) || strings.EqualFold(k, "X-Amz-Meta-"+metaKey(alg)) {
			if b, err := hex.DecodeString(v); err == nil {
				return b, true
			}
		}
	}
	return nil, false
}

// Checksum returns a whole-object checksum: from the object's metadata,
// from the memory cache (by key and ETag), or computed by reading the
// object once for every algorithm at the same time.
func (b *Backend) Checksum(ctx context.Context, name, alg string) ([]byte, error) {
	alg = checksum.Canonical(alg)
	if alg == "" {
		return nil, fmt.Errorf("checksum of %q: %w: unknown algorithm", name, storage.ErrUnsupported)
	}
	f, err := b.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	oi := f.(*file).oi
	if sum, ok := b.known(oi, alg); ok {
		return sum, nil
	}
	m := checksum.NewMulti(checksum.Names)
	buf, err := b.bufs.Get(ctx, 1<<20)
	if err != nil {
		return nil, err
	}
	defer buf.Release()
	for off := int64(0); off < oi.Size; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := f.ReadAt(buf.B, off)
		m.Write(buf.B[:n])
		off += int64(n)
		if err != nil && off < oi.Size {
			return nil, err
		}
	}
	sums := m.Sums()
	for a, s := range sums {
		b.sums.put(oi.Key, oi.ETag, a, s)
	}
	return sums[alg], nil
}

// known is the checksum from metadata or the cache.
func (b *Backend) known(oi minio.ObjectInfo, alg string) ([]byte, bool) {
	if sum, ok := metaSum(oi, alg); ok {
		return sum, true
	}
	return b.sums.get(oi.Key, oi.ETag, alg)
}

// CachedChecksum returns a checksum known without reading the object.
func (b *Backend) CachedChecksum(ctx context.Context, name, alg string) ([]byte, bool) {
	alg = checksum.Canonical(alg)
	if alg == "" || name == "" {
		return nil, false
	}
	oi, ok, err := b.head(ctx, name)
	if err != nil || !ok {
		return nil, false
	}
	return b.known(oi, alg)
}

// sumCache keeps computed checksums by key, ETag and algorithm, a bounded
// number of keys (an arbitrary one is dropped when full).
type sumCache struct {
	mu  sync.Mutex
	max int
	m   map[string]cachedSums
}

type cachedSums struct {
	etag string
	sums map[string][]byte
}

func newSumCache(max int) *sumCache { return &sumCache{max: max, m: map[string]cachedSums{}} }

func (c *sumCache) get(key, etag, alg string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.etag != etag {
		return nil, false
	}
	s, ok := e.sums[alg]
	return s, ok
}

func (c *sumCache) put(key, etag, alg string, sum []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.etag != etag {
		if !ok && len(c.m) >= c.max {
			for k := range c.m {
				delete(c.m, k)
				break
			}
		}
		e = cachedSums{etag: etag, sums: map[string][]byte{}}
		c.m[key] = e
	}
	e.sums[alg] = sum
}

func (c *sumCache) drop(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

package tpc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/storage"
)

// storageSink is a pull's destination in the local storage: a
// RandomUpload, created when the first answer tells the size, that the
// streams write at offsets; or, on a backend without random uploads, a
// plain Upload written in order by one stream. Nothing is visible under
// the name before Commit.
type storageSink struct {
	ctx  context.Context
	b    storage.Backend
	name string
	opts storage.CreateOptions

	mu   sync.Mutex
	ru   storage.RandomUpload
	up   storage.Upload
	next int64 // up: the offset of the next byte
	size int64
}

// canRandom reports whether b takes uploads written at offsets (several
// streams); otherwise a pull is one stream.
func canRandom(b storage.Backend) bool {
	_, ok := b.(storage.RandomUploader)
	return ok
}

func newStorageSink(ctx context.Context, b storage.Backend, name string, opts storage.CreateOptions) client.Sink {
	return &storageSink{ctx: ctx, b: b, name: name, opts: opts, size: -1}
}

var errNotStarted = errors.New("destination not created yet")

func (s *storageSink) Truncate(size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ru != nil || s.up != nil {
		return fmt.Errorf("destination sized twice")
	}
	s.size = size
	if ru, ok := s.b.(storage.RandomUploader); ok {
		u, err := ru.CreateRandom(s.ctx, s.name, size, s.opts)
		if err != nil {
			return err
		}
		s.ru = u
		return nil
	}
	o := s.opts
	o.Size = size
	u, err := s.b.Create(s.ctx, s.name, o)
	if err != nil {
		return err
	}
	s.up = u
	return nil
}

func (s *storageSink) WriteAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	ru, up := s.ru, s.up
	s.mu.Unlock()
	switch {
	case ru != nil:
		return ru.WriteAt(p, off)
	case up == nil:
		return 0, errNotStarted
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if off != s.next {
		return 0, fmt.Errorf("this storage is written in order: a write at %d, expected %d", off, s.next)
	}
	n, err := up.Write(p)
	s.next += int64(n)
	return n, err
}

func (s *storageSink) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	ru := s.ru
	s.mu.Unlock()
	if ru == nil {
		return 0, fmt.Errorf("this storage cannot read back an upload in progress: %w", storage.ErrUnsupported)
	}
	return ru.ReadAt(p, off)
}

func (s *storageSink) Abort() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ru != nil:
		return s.ru.Abort()
	case s.up != nil:
		return s.up.Abort()
	}
	return nil
}

// commit makes the file visible.
func (s *storageSink) commit(ctx context.Context) (storage.FileInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ru != nil:
		return s.ru.Commit(ctx)
	case s.up != nil:
		return s.up.Commit(ctx)
	}
	return storage.FileInfo{}, errNotStarted
}

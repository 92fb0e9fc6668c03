package monitor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Defaults of FileOptions.
const (
	DefaultMaxSize  = 100 << 20
	DefaultMaxAge   = 24 * time.Hour
	DefaultMaxFiles = 10
)

// FileOptions configure the records file.
type FileOptions struct {
	// Path is the file records are appended to (JSON lines).
	Path string
	// MaxSize rotates the file before it grows past this many bytes
	// (default DefaultMaxSize; negative: never).
	MaxSize int64
	// MaxAge rotates a file this old (default DefaultMaxAge; negative:
	// never).
	MaxAge time.Duration
	// MaxFiles is how many rotated files are kept (PATH.<UTC time>); the
	// oldest go (default DefaultMaxFiles; negative: all are kept).
	MaxFiles int
}

// rotatedLayout is the suffix of a rotated file: its rotation time in UTC.
const rotatedLayout = "20060102T150405.000000000Z"

// rotator is the records file: appended through a buffer, renamed aside
// when it is too large or too old.
type rotator struct {
	o      FileOptions
	f      *os.File
	w      *bufio.Writer
	size   int64
	opened time.Time
}

func openRotator(o FileOptions) (*rotator, error) {
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxFiles == 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	r := &rotator{o: o}
	if err := r.open(time.Now()); err != nil {
		return nil, err
	}
	return r, nil
}

// open opens (or creates) the file. A file found non-empty counts as
// started when it was last written: it is rotated by age no later than
// a new one would be.
func (r *rotator) open(now time.Time) error {
	f, err := os.OpenFile(r.o.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("records: %w", err)
	}
	r.f, r.size, r.opened = f, fi.Size(), now
	if r.size > 0 && fi.ModTime().Before(now) {
		r.opened = fi.ModTime()
	}
	if r.w == nil {
		r.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		r.w.Reset(f)
	}
	return nil
}

// write appends one line, rotating first when the line would take the
// file past MaxSize or the file is older than MaxAge.
func (r *rotator) write(line []byte, now time.Time) error {
	if r.f == nil {
		// A rotation failed to open the new file: try again.
		if err := r.open(now); err != nil {
			return err
		}
	}
	full := r.o.MaxSize > 0 && r.size+int64(len(line)) > r.o.MaxSize
	old := r.o.MaxAge > 0 && now.Sub(r.opened) >= r.o.MaxAge
	if r.size > 0 && (full || old) {
		if err := r.rotate(now); err != nil {
			return err
		}
	}
	n, err := r.w.Write(line)
	r.size += int64(n)
	return err
}

func (r *rotator) flush() error {
	if r.f == nil {
		return nil
	}
	return r.w.Flush()
}

// rotate renames the file to PATH.<time>, opens a new one and removes
// the oldest rotated files beyond MaxFiles.
func (r *rotator) rotate(now time.Time) error {
	if err := r.w.Flush(); err != nil {
		return err
	}
	if err := r.f.Close(); err != nil {
		return err
	}
	r.f = nil
	t := now.UTC()
	name := r.o.Path + "." + t.Format(rotatedLayout)
	for {
		if _, err := os.Lstat(name); os.IsNotExist(err) {
			break
		}
		t = t.Add(time.Nanosecond)
		name = r.o.Path + "." + t.Format(rotatedLayout)
	}
	if err := os.Rename(r.o.Path, name); err != nil {
		return fmt.Errorf("records: rotating: %w", err)
	}
	if err := r.open(now); err != nil {
		return err
	}
	r.opened = now
	r.prune()
	return nil
}

// rotated lists the rotated files, oldest first.
func (r *rotator) rotated() []string {
	dir, base := filepath.Split(r.o.Path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		suffix, ok := strings.CutPrefix(e.Name(), base+".")
		if !ok || e.IsDir() {
			continue
		}
		if _, err := time.Parse(rotatedLayout, suffix); err != nil {
			continue // not ours (a logrotate copy, an editor's backup)
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	slices.Sort(out) // the layout sorts by time
	return out
}

func (r *rotator) prune() {
	if r.o.MaxFiles < 0 {
		return
	}
	old := r.rotated()
	for len(old) > r.o.MaxFiles {
		_ = os.Remove(old[0])
		old = old[1:]
	}
}

func (r *rotator) close() error {
	if r.f == nil {
		return nil
	}
	err := r.w.Flush()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	r.f = nil
	return err
}

package dist

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// entry is one member of a tar written by writeTar.
type entry struct {
	name     string // relative, no leading slash; a directory ends in '/'
	mode     int64  // permission bits (and sticky)
	uid, gid int
	data     []byte // a regular file's content
	src      string // or the file to copy it from
}

// writeTar writes entries sorted by name, every time set to mtime, owners
// numeric only: the same entries always give the same bytes.
func writeTar(w io.Writer, entries []entry, mtime time.Time) error {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatPAX}
		var src *os.File
		switch {
		case e.name[len(e.name)-1] == '/':
			h.Typeflag = tar.TypeDir
		case e.src != "":
			f, err := os.Open(e.src)
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			h.Typeflag, h.Size, src = tar.TypeReg, st.Size(), f
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if src != nil {
			if _, err := io.Copy(tw, src); err != nil {
				return err
			}
		} else if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// dirEntries lists a directory tree as tar entries (root-owned, 0755
// directories, 0644 files), for packing the OCI layout.
func dirEntries(dir string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			out = append(out, entry{name: rel + "/", mode: 0o755})
		} else {
			out = append(out, entry{name: rel, mode: 0o644, src: p})
		}
		return nil
	})
	return out, err
}

package storage

import (
	"fmt"
	"strings"
)

// CleanPath turns a request path (already percent-decoded) into the logical
// form backends expect: no leading or trailing slash, no empty, "." or ".."
// segments. Anything that could climb out of an export is refused rather than
// resolved: "/a/../b" is an error, not "/b", so that a hostile path never
// names a different file than the one its text suggests. The root is "".
func CleanPath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: NUL byte", ErrBadPath)
	}
	if strings.IndexByte(p, '\\') >= 0 {
		return "", fmt.Errorf("%w: backslash", ErrBadPath)
	}
	if len(p) > 4096 {
		return "", fmt.Errorf("%w: %w: path longer than 4096 bytes", ErrBadPath, ErrNameTooLong)
	}
	segs := strings.Split(p, "/")
	out := segs[:0]
	for _, s := range segs {
		switch s {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%w: %q has a \"..\" segment", ErrEscapes, p)
		}
		if len(s) > 255 {
			return "", fmt.Errorf("%w: %w: longer than 255 bytes", ErrBadPath, ErrNameTooLong)
		}
		out = append(out, s)
	}
	return strings.Join(out, "/"), nil
}

// Join joins cleaned logical paths.
func Join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// Base returns the last segment of a cleaned path.
func Base(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// Dir returns all but the last segment of a cleaned path ("" for the root).
func Dir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

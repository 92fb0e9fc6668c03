package storage

import (
	"fmt"
	"slices"
	"strings"
)

// Export binds a logical prefix (cleaned, e.g. "store/mc") to a backend.
type Export struct {
	Prefix  string
	Backend Backend
}

// Namespace maps logical paths to exports, longest prefix first. It is
// immutable after NewNamespace and safe for concurrent use.
type Namespace struct {
	exports []Export // sorted by descending prefix length
}

// NewNamespace checks that prefixes are clean and distinct.
func NewNamespace(exports ...Export) (*Namespace, error) {
	ns := &Namespace{}
	seen := map[string]bool{}
	for _, e := range exports {
		p, err := CleanPath(e.Prefix)
		if err != nil {
			return nil, fmt.Errorf("export prefix %q: %w", e.Prefix, err)
		}
		if seen[p] {
			return nil, fmt.Errorf("export prefix %q given twice", "/"+p)
		}
		seen[p] = true
		e.Prefix = p
		ns.exports = append(ns.exports, e)
	}
	slices.SortFunc(ns.exports, func(a, b Export) int { return len(b.Prefix) - len(a.Prefix) })
	return ns, nil
}

// Exports returns the exports, longest prefix first.
func (ns *Namespace) Exports() []Export { return ns.exports }

// Resolve finds the export that holds a cleaned logical path and the path
// relative to it. ok is false when no export covers it.
func (ns *Namespace) Resolve(p string) (e Export, rel string, ok bool) {
	for _, e := range ns.exports {
		switch {
		case e.Prefix == "":
			return e, p, true
		case p == e.Prefix:
			return e, "", true
		case strings.HasPrefix(p, e.Prefix+"/"):
			return e, p[len(e.Prefix)+1:], true
		}
	}
	return Export{}, "", false
}

// Children lists the next path segments of export prefixes strictly below
// p, for paths above every export ("/" when exports are "/store" and
// "/user"): the virtual directories a listing of p shows. nil means p is
// not such an ancestor.
func (ns *Namespace) Children(p string) []string {
	var out []string
	for _, e := range ns.exports {
		var rest string
		switch {
		case p == "" && e.Prefix != "":
			rest = e.Prefix
		case p != "" && strings.HasPrefix(e.Prefix, p+"/"):
			rest = e.Prefix[len(p)+1:]
		default:
			continue
		}
		seg, _, _ := strings.Cut(rest, "/")
		if !slices.Contains(out, seg) {
			out = append(out, seg)
		}
	}
	slices.Sort(out)
	return out
}

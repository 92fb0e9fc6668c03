package fed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/wanda-fed/wanda/internal/storage"
)

// LocalExport is one export of a data server as the locate answer needs it.
type LocalExport struct {
	// Prefix is the logical prefix, as in the config ("/store").
	Prefix string
	// Dir is the local directory the prefix maps to; it is reported as
	// the replica's LocalPath (the site's own layout). Empty for backends
	// that have none.
	Dir      string
	ReadOnly bool
	Backend  storage.Backend
}

// Local answers locate queries for the exports of one data server: a cheap
// Stat, never an open. It is immutable after NewLocal and safe for
// concurrent use.
type Local struct {
	ns       *storage.Namespace
	exports  []LocalExport          // as given, prefixes canonical
	byPrefix map[string]LocalExport // by storage prefix ("store", "" for "/")
	self     func() Member
}

// NewLocal checks the exports (clean, distinct prefixes, a backend each)
// and returns their locate answerer. self describes the member (URL, ID,
// labels, priority, load) for the replicas it reports.
func NewLocal(exports []LocalExport, self func() Member) (*Local, error) {
	if self == nil {
		return nil, errors.New("fed.NewLocal: nil self")
	}
	l := &Local{byPrefix: map[string]LocalExport{}, self: self}
	var sexp []storage.Export
	for i, e := range exports {
		p, err := CleanPrefix(e.Prefix)
		if err != nil {
			return nil, fmt.Errorf("export %d: %w", i, err)
		}
		if e.Backend == nil {
			return nil, fmt.Errorf("export %q: no backend", p)
		}
		e.Prefix = p
		key := strings.TrimPrefix(p, "/")
		if _, dup := l.byPrefix[key]; dup {
			return nil, fmt.Errorf("export prefix %q given twice", p)
		}
		l.byPrefix[key] = e
		l.exports = append(l.exports, e)
		sexp = append(sexp, storage.Export{Prefix: key, Backend: e.Backend})
	}
	ns, err := storage.NewNamespace(sexp...)
	if err != nil {
		return nil, err
	}
	l.ns = ns
	return l, nil
}

// Exports lists the logical prefixes for Member.Exports.
func (l *Local) Exports() []Export {
	out := make([]Export, len(l.exports))
	for i, e := range l.exports {
		out[i] = Export{Prefix: e.Prefix, ReadOnly: e.ReadOnly}
	}
	return out
}

// WritableDirs lists the local directories of writable exports, for
// DiskSpace.
func (l *Local) WritableDirs() []string {
	var out []string
	for _, e := range l.exports {
		if !e.ReadOnly && e.Dir != "" {
			out = append(out, e.Dir)
		}
	}
	return out
}

// CleanLogical returns a logical path in canonical form ("/store/x", "/"
// for the root), refusing what storage.CleanPath refuses ("..", NUL,
// backslash, more than 4096 bytes) and control characters.
func CleanLogical(p string) (string, error) {
	if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("%w: control character", storage.ErrBadPath)
	}
	c, err := storage.CleanPath(p)
	if err != nil {
		return "", err
	}
	return "/" + c, nil
}

// Locate says whether this server holds logical, and where: the longest
// export prefix that covers it decides. A path under no export, missing,
// or that the backend refuses to name (escaping symlinks, hidden upload
// files) is not found; any other failure is reported as unavailable with
// its message, so a redirector does not take it for a "no".
func (l *Local) Locate(ctx context.Context, logical string) Located {
	out := Located{Version: Version, Path: logical, Status: NotFound}
	p, err := CleanLogical(logical)
	if err != nil {
		out.Errors = []string{err.Error()}
		return out
	}
	out.Path = p
	se, rel, ok := l.ns.Resolve(p[1:])
	if !ok {
		return out
	}
	e := l.byPrefix[se.Prefix]
	fi, err := e.Backend.Stat(ctx, rel)
	switch {
	case err == nil:
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrNotDir),
		errors.Is(err, storage.ErrEscapes), errors.Is(err, storage.ErrBadPath):
		return out
	default:
		out.Status = Unavailable
		self := l.self()
		out.Errors = []string{fmt.Sprintf("%s: %v", self.ID, err)}
		return out
	}
	self := l.self()
	r := Replica{
		URL:      FileURL(self.URL, p),
		Member:   self.ID,
		Role:     self.Role,
		Size:     fi.Size,
		ModTime:  fi.ModTime,
		IsDir:    fi.IsDir,
		Writable: !e.ReadOnly,
		Labels:   self.Labels,
		Priority: self.Priority,
		Load:     self.Load,
	}
	if e.Dir != "" {
		r.LocalPath = filepath.Join(e.Dir, filepath.FromSlash(rel))
	}
	out.Status = Found
	out.Replicas = []Replica{r}
	return out
}

// ServeHTTP answers GET/HEAD /api/v1/locate?path=P with a Located (200
// for every answer, found or not); a missing or hostile path is a 400.
func (l *Local) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		WriteError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed: use GET or HEAD")
		return
	}
	// Strictly: net/http's Request.URL.Query drops malformed pairs silently.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		WriteError(w, http.StatusBadRequest, "bad query: "+err.Error())
		return
	}
	if len(q[ParamPath]) > 1 {
		WriteError(w, http.StatusBadRequest, "path parameter given more than once")
		return
	}
	raw := q.Get(ParamPath)
	if raw == "" {
		WriteError(w, http.StatusBadRequest, "missing path parameter")
		return
	}
	if _, err := CleanLogical(raw); err != nil {
		WriteError(w, http.StatusBadRequest, "path: "+err.Error())
		return
	}
	WriteJSON(w, http.StatusOK, l.Locate(r.Context(), raw))
}

// WriteJSON writes v as a protocol answer: JSON, never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(Error{Version: Version, Error: "encoding answer: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError writes a protocol Error answer.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, Error{Version: Version, Error: msg})
}

package httpserve

import (
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/storage"
)

// Entry is one line of a JSON directory listing (GET on a directory with
// Accept: application/json). The shape is part of wanda's API.
type Entry struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	IsDir   bool      `json:"dir"`
}

// Listing is the JSON answer for a directory.
type Listing struct {
	Path    string  `json:"path"`
	Entries []Entry `json:"entries"`
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, t target) error {
	if err := h.authorize(r.Context(), r, auth.List, t); err != nil {
		return err
	}
	infos, err := t.export.Backend.List(r.Context(), t.rel)
	if err != nil {
		return err
	}
	l := Listing{Path: t.URLPath(), Entries: make([]Entry, 0, len(infos))}
	hide := h.hidden(r, t)
	for _, fi := range infos {
		if hide != nil && hide("/"+storage.Join(t.logical, fi.Name)) {
			continue
		}
		l.Entries = append(l.Entries, Entry{Name: fi.Name, Path: "/" + storage.Join(t.logical, fi.Name), Size: fi.Size, ModTime: fi.ModTime.UTC(), IsDir: fi.IsDir})
	}
	return writeListing(w, r, l)
}

func (h *Handler) listVirtual(w http.ResponseWriter, r *http.Request, t target, kids []string) error {
	l := Listing{Path: t.URLPath(), Entries: make([]Entry, 0, len(kids))}
	hide := h.hidden(r, t)
	for _, k := range kids {
		if hide != nil && hide("/"+storage.Join(t.logical, k)) {
			continue
		}
		l.Entries = append(l.Entries, Entry{Name: k, Path: "/" + storage.Join(t.logical, k), IsDir: true})
	}
	return writeListing(w, r, l)
}

func writeListing(w http.ResponseWriter, r *http.Request, l Listing) error {
	w.Header().Set("Cache-Control", "no-cache")
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodHead {
			return nil
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(l)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return nil
	}
	return listingHTML.Execute(w, l)
}

var listingHTML = template.Must(template.New("listing").Funcs(template.FuncMap{
	"href": func(e Entry) string {
		u := (&url.URL{Path: e.Path}).EscapedPath()
		if e.IsDir && !strings.HasSuffix(u, "/") {
			u += "/"
		}
		return u
	},
	"parent": func(p string) string {
		p = strings.TrimSuffix(p, "/")
		if i := strings.LastIndexByte(p, '/'); i > 0 {
			return p[:i] + "/"
		}
		return "/"
	},
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Index of {{.Path}}</title>
<style>body{font-family:monospace}td{padding:0 1em}td.n{text-align:right}</style></head>
<body><h1>Index of {{.Path}}</h1>
<table><tr><th>name</th><th>size</th><th>modified (UTC)</th></tr>
{{if ne .Path "/"}}<tr><td><a href="{{parent .Path}}">../</a></td><td></td><td></td></tr>{{end}}
{{range .Entries}}<tr><td><a href="{{href .}}">{{.Name}}{{if .IsDir}}/{{end}}</a></td><td class="n">{{if not .IsDir}}{{.Size}}{{end}}</td><td>{{if not .ModTime.IsZero}}{{.ModTime.Format "2006-01-02 15:04:05"}}{{end}}</td></tr>
{{end}}</table></body></html>
`))

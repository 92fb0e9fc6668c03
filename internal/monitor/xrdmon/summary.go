package xrdmon

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The summary stream (`xrd.report`): one XML document per packet,
//
//	<statistics tod=.. ver=.. src=host:port tos=.. pgm=.. ins=.. pid=.. site=..>
//	  <stats id="info">...</stats><stats id="link">...</stats>...
//	</statistics>
//
// each <stats id> a section of counters (link, proc, xrootd, ofs, oss,
// sched, ...), nested elements for groups (<ops><open>..</open></ops>).
// XRootD's mpxstats flattens it into "section.group.name value" lines;
// ParseSummary does the same.

// SummaryHead is the <statistics> element's attributes.
type SummaryHead struct {
	Tod     int64  // the time of the report
	Version string // the program's version
	Host    string
	Port    int
	Tos     int64  // the server's start time
	Program string // xrootd, cmsd; wanda's roles report "wanda"
	Name    string // the instance name ("anon" when unnamed)
	PID     int
	Site    string
}

// XMLWriter appends a summary document: Start and End elements, Leaf
// elements with a value. Values and attributes are escaped.
type XMLWriter struct {
	B []byte
}

// Head starts the <statistics> document.
func (w *XMLWriter) Head(h SummaryHead) {
	w.Start("statistics", "tod", strconv.FormatInt(h.Tod, 10), "ver", h.Version,
		"src", h.Host+":"+strconv.Itoa(h.Port), "tos", strconv.FormatInt(h.Tos, 10), "pgm", h.Program,
		"ins", h.Name, "pid", strconv.Itoa(h.PID), "site", h.Site)
}

// Start opens an element with attributes given as name, value pairs.
func (w *XMLWriter) Start(name string, attrs ...string) {
	w.B = append(w.B, '<')
	w.B = append(w.B, name...)
	for i := 0; i+1 < len(attrs); i += 2 {
		w.B = append(w.B, ' ')
		w.B = append(w.B, attrs[i]...)
		w.B = append(w.B, '=', '"')
		w.B = appendEscaped(w.B, attrs[i+1], true)
		w.B = append(w.B, '"')
	}
	w.B = append(w.B, '>')
}

// Stats opens a section: <stats id="id">.
func (w *XMLWriter) Stats(id string, attrs ...string) {
	w.Start("stats", append([]string{"id", id}, attrs...)...)
}

// End closes an element.
func (w *XMLWriter) End(name string) {
	w.B = append(w.B, '<', '/')
	w.B = append(w.B, name...)
	w.B = append(w.B, '>')
}

// Text appends escaped character data (quotes stay: XRootD writes
// paths as "/x" in its text, and mpxstats prints them as they are).
func (w *XMLWriter) Text(s string) { w.B = appendEscaped(w.B, s, false) }

// Leaf appends <name>value</name>.
func (w *XMLWriter) Leaf(name, value string) {
	w.Start(name)
	w.Text(value)
	w.End(name)
}

// Int appends <name>v</name>.
func (w *XMLWriter) Int(name string, v int64) {
	w.Start(name)
	w.B = strconv.AppendInt(w.B, v, 10)
	w.End(name)
}

// appendEscaped escapes &, < and > (and " in an attribute); a control
// character becomes a space.
func appendEscaped(b []byte, s string, attr bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '&':
			b = append(b, "&amp;"...)
		case c == '<':
			b = append(b, "&lt;"...)
		case c == '>':
			b = append(b, "&gt;"...)
		case c == '"' && attr:
			b = append(b, "&quot;"...)
		case c < 0x20:
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return b
}

// KV is one value of a flattened summary.
type KV struct{ Key, Value string }

// ParseSummary flattens a summary document into its values in document
// order, keyed as mpxstats -f flat prints them: the <statistics>
// attributes by name, then "section.element..." (a <stats id="x">
// element is named by its id; quotes around a value are dropped).
func ParseSummary(b []byte) ([]KV, error) {
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	var (
		out   []KV
		path  []string
		text  []strings.Builder
		root  bool
		depth int
	)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("xrdmon: summary: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 {
				if t.Name.Local != "statistics" {
					return nil, fmt.Errorf("xrdmon: summary: the root element is <%s>, not <statistics>", t.Name.Local)
				}
				root = true
				for _, a := range t.Attr {
					out = append(out, KV{a.Name.Local, a.Value})
				}
				continue
			}
			name := t.Name.Local
			if name == "stats" {
				for _, a := range t.Attr {
					if a.Name.Local == "id" {
						name = a.Value
					}
				}
			}
			if len(text) > 0 {
				// Text before a child is the parent's value (<paths>1<stats...).
				flushText(&out, path, &text[len(text)-1])
			}
			path = append(path, name)
			text = append(text, strings.Builder{})
		case xml.CharData:
			if len(text) > 0 {
				text[len(text)-1].Write(t)
			}
		case xml.EndElement:
			depth--
			if depth == 0 {
				continue
			}
			flushText(&out, path, &text[len(text)-1])
			path, text = path[:len(path)-1], text[:len(text)-1]
		}
	}
	if !root {
		return nil, errors.New("xrdmon: summary: no <statistics> element")
	}
	return out, nil
}

func flushText(out *[]KV, path []string, t *strings.Builder) {
	v := strings.TrimSpace(t.String())
	t.Reset()
	if v == "" {
		return
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	*out = append(*out, KV{strings.Join(path, "."), v})
}

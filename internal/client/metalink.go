package client

import (
	"encoding/xml"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// parseLinks returns the replicas advertised in RFC 6249 Link headers
// (`<url>; rel=duplicate; pri=N`), resolved against base, best (lowest
// pri) first. Other relations and unparsable entries are ignored: an
// alternate is a hint, never a reason to fail.
func parseLinks(base *url.URL, values []string) []*url.URL {
	type alt struct {
		u   *url.URL
		pri int
		i   int
	}
	var alts []alt
	for _, v := range values {
		for _, link := range splitLinks(v) {
			link = strings.TrimSpace(link)
			if !strings.HasPrefix(link, "<") {
				continue
			}
			end := strings.IndexByte(link, '>')
			if end < 0 {
				continue
			}
			target, params := link[1:end], link[end+1:]
			dup, pri := false, 999999
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				v = strings.Trim(strings.TrimSpace(v), `"`)
				switch strings.ToLower(strings.TrimSpace(k)) {
				case "rel":
					for _, r := range strings.Fields(v) {
						if strings.EqualFold(r, "duplicate") {
							dup = true
						}
					}
				case "pri":
					if n, err := strconv.Atoi(v); err == nil {
						pri = n
					}
				}
			}
			if !dup {
				continue
			}
			u, err := url.Parse(target)
			if err != nil {
				continue
			}
			if base != nil {
				u = base.ResolveReference(u)
			}
			if u.Scheme == "" || u.Host == "" {
				continue
			}
			alts = append(alts, alt{u, pri, len(alts)})
		}
	}
	sort.SliceStable(alts, func(a, b int) bool { return alts[a].pri < alts[b].pri })
	out := make([]*url.URL, 0, len(alts))
	for _, a := range alts {
		out = append(out, a.u)
	}
	return out
}

// splitLinks splits a Link header value at the commas that separate links
// (not those inside <...> or quotes).
func splitLinks(v string) []string {
	var out []string
	inURL, inQuote, start := false, false, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '<' && !inQuote:
			inURL = true
		case c == '>' && !inQuote:
			inURL = false
		case c == '"' && !inURL:
			inQuote = !inQuote
		case c == ',' && !inURL && !inQuote:
			out = append(out, v[start:i])
			start = i + 1
		}
	}
	return append(out, v[start:])
}

// metalinkType is the media type of a Metalink 4 document (RFC 5854).
const metalinkType = "application/metalink4+xml"

type metalink4 struct {
	Files []struct {
		Name string `xml:"name,attr"`
		Size int64  `xml:"size"`
		URLs []struct {
			Priority int    `xml:"priority,attr"`
			URL      string `xml:",chardata"`
		} `xml:"url"`
	} `xml:"file"`
}

// parseMetalink returns the URLs of the first file of a Metalink 4
// document, best priority first (RFC 5854: 1 is best; none = 999999).
func parseMetalink(base *url.URL, r io.Reader) ([]*url.URL, error) {
	var m metalink4
	if err := xml.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&m); err != nil {
		return nil, err
	}
	if len(m.Files) == 0 {
		return nil, nil
	}
	type cand struct {
		u   *url.URL
		pri int
	}
	var cs []cand
	for _, e := range m.Files[0].URLs {
		u, err := url.Parse(strings.TrimSpace(e.URL))
		if err != nil {
			continue
		}
		if base != nil {
			u = base.ResolveReference(u)
		}
		if u.Host == "" {
			continue
		}
		pri := e.Priority
		if pri <= 0 {
			pri = 999999
		}
		cs = append(cs, cand{u, pri})
	}
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].pri < cs[b].pri })
	out := make([]*url.URL, len(cs))
	for i, c := range cs {
		out[i] = c.u
	}
	return out, nil
}

package client

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// statDAV describes u with PROPFIND depth 0 (works for directories).
func (t *HTTPTransport) statDAV(ctx context.Context, u *url.URL, sums bool) (Info, error) {
	infos, err := t.propfind(ctx, u, "0", sums)
	if err != nil {
		return Info{}, err
	}
	if len(infos) == 0 {
		return Info{}, fmt.Errorf("PROPFIND %s: empty answer", Redact(u))
	}
	return infos[0], nil
}

// List returns the entries of directory u (PROPFIND depth 1), or the file
// itself when u is a file. The answer names u itself too, usually first
// but not always (RFC 4918 sets no order): the entry whose path is u's is
// left out wherever it is.
func (t *HTTPTransport) List(ctx context.Context, u *url.URL) ([]Info, error) {
	infos, err := t.propfind(ctx, u, "1", false)
	if err != nil {
		return nil, err
	}
	for i, in := range infos {
		if !samePath(in.URL, u) {
			continue
		}
		if !in.IsDir {
			return infos[i : i+1], nil // a file lists itself
		}
		return append(infos[:i:i], infos[i+1:]...), nil
	}
	// No entry has u's path (a proxy rewriting paths): the first is the
	// collection itself, as most servers send it.
	if len(infos) > 1 || (len(infos) == 1 && infos[0].IsDir) {
		return infos[1:], nil
	}
	return infos, nil
}

// samePath reports whether the entry at raw names the same path as u,
// with or without a trailing slash (both are unescaped).
func samePath(raw string, u *url.URL) bool {
	e, err := url.Parse(raw)
	if err != nil {
		return false
	}
	trim := func(p string) string { return strings.TrimSuffix(p, "/") }
	return trim(e.Path) == trim(u.Path)
}

type msResp struct {
	Responses []struct {
		Href     string `xml:"href"`
		Propstat []struct {
			Status string `xml:"status"`
			Prop   struct {
				Length       string `xml:"getcontentlength"`
				LastModified string `xml:"getlastmodified"`
				ResourceType struct {
					Collection *struct{} `xml:"collection"`
				} `xml:"resourcetype"`
				Checksums string `xml:"Checksums"`
				ETag      string `xml:"getetag"`
			} `xml:"prop"`
		} `xml:"propstat"`
	} `xml:"response"`
}

const propfindBody = `<?xml version="1.0" encoding="utf-8"?>
<D:propfind xmlns:D="DAV:" xmlns:C="http://www.dcache.org/2013/webdav"><D:prop>
<D:getcontentlength/><D:getlastmodified/><D:getetag/><D:resourcetype/><C:Checksums/>
</D:prop></D:propfind>`

func (t *HTTPTransport) propfind(ctx context.Context, base *url.URL, depth string, sums bool) ([]Info, error) {
	hdr := http.Header{"Depth": {depth}, "Content-Type": {"application/xml"}}
	body := propfindBody
	if !sums {
		// Asking for checksums may make the server read the whole file
		// (every file, in a listing).
		body = strings.Replace(body, "<C:Checksums/>", "", 1)
	}
	resp, err := t.do(ctx, "PROPFIND", base, strings.NewReader(body), int64(len(body)), hdr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ms msResp
	if err := xml.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&ms); err != nil {
		return nil, fmt.Errorf("PROPFIND %s: bad answer: %w", Redact(base), err)
	}
	out := make([]Info, 0, len(ms.Responses))
	alts := parseLinks(base, resp.Header.Values("Link"))
	for _, r := range ms.Responses {
		href, err := url.Parse(r.Href)
		if err != nil {
			continue
		}
		abs := base.ResolveReference(href)
		// Size -1 until the answer gives it: a file listed without
		// getcontentlength has an unknown size, not an empty one.
		in := Info{URL: abs.String(), Name: lastSeg(abs.Path), Size: -1}
		for _, ps := range r.Propstat {
			if !strings.Contains(ps.Status, " 200") {
				continue
			}
			p := ps.Prop
			in.IsDir = p.ResourceType.Collection != nil
			if n, err := strconv.ParseInt(strings.TrimSpace(p.Length), 10, 64); err == nil {
				in.Size = n
			}
			in.ETag = strings.TrimSpace(p.ETag)
			if t, err := http.ParseTime(p.LastModified); err == nil {
				in.ModTime = t
			}
			if p.Checksums != "" {
				in.ChecksumProp = strings.TrimSpace(p.Checksums)
				in.Sums = parseChecksumProp(in.ChecksumProp)
			}
		}
		if in.IsDir && in.Size < 0 {
			in.Size = 0 // a directory's size means nothing; servers omit it
		}
		out = append(out, in)
	}
	if depth == "0" && len(out) > 0 {
		out[0].Alternates = alts
	}
	return out, nil
}

// parseChecksumProp reads dCache's Checksums property ("adler32=0a1b2c3d,md5=...";
// md5 base64 in some servers, hex in others).
func parseChecksumProp(v string) map[string][]byte {
	out := map[string][]byte{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		alg := checksum.Canonical(k)
		if alg == "" {
			continue
		}
		if sum, err := checksum.ParseDigest(k + "=" + val); err == nil && sum[alg] != nil {
			out[alg] = sum[alg]
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Package client talks to wanda (and to any HTTP/WebDAV storage: XRootD's
// XrdHttp, dCache, nginx) for the CLI verbs: stat, list, get, put, remove,
// mkdir, checksum. It is the seed of the transfer engine (parallel streams,
// vector reads, retries, failover grow here) and imports nothing of the
// server side.
package client

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// StatusError is an HTTP answer that is not a success.
type StatusError struct {
	Method string
	URL    string
	Code   int
	Msg    string // the server's message, first line, trimmed
}

func (e *StatusError) Error() string {
	msg := e.Msg
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, msg)
}

// Retryable reports whether the same request may succeed later.
func (e *StatusError) Retryable() bool {
	switch e.Code {
	case 408, 429, 500, 502, 503, 504:
		return true
	}
	return false
}

// IsNotFound reports a 404.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// Client is safe for concurrent use.
type Client struct {
	HTTP      *http.Client
	UserAgent string
}

// New returns a client with keep-alive connection pooling sized for
// parallel transfers, and bounded dial and header timeouts (no overall
// timeout: a large healthy transfer may take hours).
func New() *Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	return &Client{HTTP: &http.Client{Transport: tr}, UserAgent: "wanda-client"}
}

// do sends a request and turns non-2xx answers into *StatusError.
func (c *Client) do(ctx context.Context, method, u string, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", c.UserAgent)
	if body != nil {
		if s, ok := body.(interface{ Size() int64 }); ok {
			req.ContentLength = s.Size()
		}
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusMultiStatus {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if strings.HasPrefix(msg, "<") {
			msg = "" // an HTML or XML error page says nothing a terminal can show
		}
		return nil, &StatusError{Method: method, URL: u, Code: resp.StatusCode, Msg: msg}
	}
	return resp, nil
}

// Info describes a remote file or directory.
type Info struct {
	Name      string    `json:"name"`
	URL       string    `json:"url"`
	Size      int64     `json:"size"`
	ModTime   time.Time `json:"mtime"`
	IsDir     bool      `json:"dir"`
	Checksums string    `json:"checksums,omitempty"`
}

// Stat describes u (PROPFIND depth 0).
func (c *Client) Stat(ctx context.Context, u string) (Info, error) {
	infos, err := c.propfind(ctx, u, "0")
	if err != nil {
		return Info{}, err
	}
	if len(infos) == 0 {
		return Info{}, fmt.Errorf("PROPFIND %s: empty answer", u)
	}
	return infos[0], nil
}

// List returns the entries of directory u (PROPFIND depth 1), or the file
// itself when u is a file.
func (c *Client) List(ctx context.Context, u string) ([]Info, error) {
	infos, err := c.propfind(ctx, u, "1")
	if err != nil {
		return nil, err
	}
	if len(infos) > 1 || (len(infos) == 1 && infos[0].IsDir) {
		return infos[1:], nil
	}
	return infos, nil
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
			} `xml:"prop"`
		} `xml:"propstat"`
	} `xml:"response"`
}

const propfindBody = `<?xml version="1.0" encoding="utf-8"?>
<D:propfind xmlns:D="DAV:" xmlns:C="http://www.dcache.org/2013/webdav"><D:prop>
<D:getcontentlength/><D:getlastmodified/><D:resourcetype/><C:Checksums/>
</D:prop></D:propfind>`

func (c *Client) propfind(ctx context.Context, u, depth string) ([]Info, error) {
	base, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{"Depth": {depth}, "Content-Type": {"application/xml"}}
	body := propfindBody
	if depth == "1" {
		// Listing checksums would make the server read every file.
		body = strings.Replace(body, "<C:Checksums/>", "", 1)
	}
	resp, err := c.do(ctx, "PROPFIND", u, strings.NewReader(body), hdr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ms msResp
	if err := xml.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&ms); err != nil {
		return nil, fmt.Errorf("PROPFIND %s: bad answer: %w", u, err)
	}
	out := make([]Info, 0, len(ms.Responses))
	for _, r := range ms.Responses {
		href, err := url.Parse(r.Href)
		if err != nil {
			continue
		}
		abs := base.ResolveReference(href)
		in := Info{URL: abs.String(), Name: lastSeg(abs.Path)}
		for _, ps := range r.Propstat {
			if !strings.Contains(ps.Status, " 200") {
				continue
			}
			p := ps.Prop
			in.IsDir = p.ResourceType.Collection != nil
			if n, err := strconv.ParseInt(strings.TrimSpace(p.Length), 10, 64); err == nil {
				in.Size = n
			}
			if t, err := http.ParseTime(p.LastModified); err == nil {
				in.ModTime = t
			}
			if p.Checksums != "" {
				in.Checksums = strings.TrimSpace(p.Checksums)
			}
		}
		out = append(out, in)
	}
	return out, nil
}

func lastSeg(p string) string {
	p = strings.TrimSuffix(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// Remove deletes u. A directory needs recursive, so that `rm` of a
// directory by mistake does not delete a tree.
func (c *Client) Remove(ctx context.Context, u string, recursive bool) error {
	if !recursive {
		in, err := c.Stat(ctx, u)
		if err != nil {
			return err
		}
		if in.IsDir {
			return fmt.Errorf("%s is a directory (use -r to remove it and everything below)", u)
		}
	}
	resp, err := c.do(ctx, http.MethodDelete, u, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Mkdir creates directory u; with parents, missing parents too and an
// existing directory is not an error.
func (c *Client) Mkdir(ctx context.Context, u string, parents bool) error {
	pu, err := url.Parse(u)
	if err != nil {
		return err
	}
	if !parents {
		resp, err := c.do(ctx, "MKCOL", u, nil, nil)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	segs := strings.Split(strings.Trim(pu.Path, "/"), "/")
	for i := range segs {
		step := *pu
		step.Path = "/" + strings.Join(segs[:i+1], "/")
		resp, err := c.do(ctx, "MKCOL", step.String(), nil, nil)
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusMethodNotAllowed {
			continue // exists
		}
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	return nil
}

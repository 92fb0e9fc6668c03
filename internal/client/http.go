package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// StatusError is an HTTP answer that is not a success.
type StatusError struct {
	Method string
	URL    string
	Code   int
	Msg    string // the server's message, first line, trimmed
	// RetryAfter is the wait the server asked for (Retry-After), if any.
	RetryAfter time.Duration
	// DigestMismatch names the algorithm when a server refused an upload
	// whose bytes did not match its Digest (Wanda-Digest-Mismatch).
	DigestMismatch string
	// Alternates are replicas the answer advertised (RFC 6249 Link
	// headers): where a failing server says to go instead.
	Alternates []*url.URL
}

func (e *StatusError) Error() string {
	msg := e.Msg
	switch {
	case e.Code == http.StatusUnauthorized || e.Code == http.StatusForbidden:
		// "401 Unauthorized: invalid token: token expired": the status
		// says which refusal (no valid credential, or no right), the
		// server's text why.
		if msg == "" {
			return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, http.StatusText(e.Code))
		}
		return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Code, http.StatusText(e.Code), msg)
	case msg == "":
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

// Is maps statuses to the engine's sentinel errors.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == http.StatusNotFound || e.Code == http.StatusGone
	case ErrForbidden:
		return e.Code == http.StatusForbidden
	case ErrUnauthorized:
		return e.Code == http.StatusUnauthorized
	case ErrExist:
		return e.Code == http.StatusPreconditionFailed && (e.Method == http.MethodPut || e.Method == "MOVE")
	case ErrChecksum:
		return e.DigestMismatch != ""
	}
	return false
}

// ErrNoRanges: the server answered a ranged GET with the whole file (200).
// Skipping to the offset would cost every stream the bytes before its
// chunk, so a read far into the file fails with it instead; a download
// then transfers the file again in one stream (see Client.download).
var ErrNoRanges = errors.New("the server ignores byte ranges")

// maxSkip is how far into a whole-file answer a ranged read still skips to
// its offset (cheaper than failing and asking again).
const maxSkip = 1 << 20

// IsNotFound reports a missing file, whatever the protocol said.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// HTTPTransport is the http:// and https:// transport. Bulk streams each get
// their own HTTP/1.1 connection (never multiplexed on one HTTP/2
// connection, whose single TCP window would cap them all at window/RTT);
// idle connections are kept for reuse, so many small files pay no new
// connection each.
type HTTPTransport struct {
	Client    *http.Client
	UserAgent string
	Log       *slog.Logger
	// PlanOptions shape vector reads (gap, ranges and header bytes per
	// request); zero fields take DefaultPlanOptions.
	PlanOptions PlanOptions
	// Token, when set, gives the bearer token sent as Authorization; it
	// is called for every request (auth.go: to the hosts the user named,
	// and to others over https only).
	Token func() (string, error)
	// OnlyTrusted sends the token only to the hosts given to TrustHost,
	// over https too (a service whose URLs come from its users, such as
	// the transfer service, must not hand its token to any host named).
	OnlyTrusted bool
	// RenewToken, when set, is called after a 401 to the token sent: it
	// looks at the source at once (cred.TokenSource.Renew), and a token
	// other than the refused one is tried again.
	RenewToken func() (string, error)

	parts      sync.Map    // scheme://host -> bool: the server takes parallel PUT parts
	certs      certClients // per-operation client certificates (WithClientCert)
	tokenHosts sync.Map    // host:port -> true: the token may go there over http
}

// NewHTTPTransport returns a transport with keep-alive pooling sized for
// parallel transfers and bounded dial and header timeouts (no overall
// timeout: the engine's stall watchdog ends dead transfers, and a large
// healthy one may take hours). tlsConf may be nil.
func NewHTTPTransport(tlsConf *tls.Config) *HTTPTransport {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   30 * time.Second,
		ExpectContinueTimeout: 5 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		TLSClientConfig:       tlsConf,
		// A non-nil empty map turns HTTP/2 off for TLS too.
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
		WriteBufferSize: 256 << 10,
		ReadBufferSize:  256 << 10,
	}
	return &HTTPTransport{
		Client: &http.Client{
			Transport: tr,
			// The engine follows redirects itself: it caches them, keeps
			// the alternates they advertise and re-asks the redirector
			// when a server fails.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		UserAgent: "wanda-client",
		Log:       slog.New(slog.DiscardHandler),
	}
}

// do sends a request and turns non-2xx answers into *StatusError and
// 3xx into *RedirectError.
func (t *HTTPTransport) do(ctx context.Context, method string, u *url.URL, body io.Reader, size int64, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, Redact(u), err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", t.UserAgent)
	var tok string
	var withheld bool
	if x := headersFrom(ctx); x != nil {
		// A third-party copy's delegated headers: its Authorization
		// replaces ours.
		tok, withheld = x.apply(req.Header, u)
	} else {
		tok, withheld, err = t.bearerFor(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, Redact(u), err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	if body != nil {
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
	}
	hc, err := t.clientFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, Redact(u), err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = Redact(u) // net/http names the URL as sent: authz and all
		}
		return nil, err
	}
	if w := watchdogFrom(ctx); w != nil {
		w.Kick() // an answer is progress, and so is every byte of its body
		resp.Body = kickBody{resp.Body, w}
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified:
		defer discard(resp.Body)
		return nil, t.redirect(u, resp)
	case resp.StatusCode >= 300 && resp.StatusCode != http.StatusMultiStatus:
		defer discard(resp.Body)
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if strings.HasPrefix(msg, "<") {
			msg = "" // an HTML or XML error page says nothing a terminal can show
		}
		se := &StatusError{Method: method, URL: Redact(u), Code: resp.StatusCode, Msg: scrub(msg, tok),
			RetryAfter:     parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
			DigestMismatch: resp.Header.Get("Wanda-Digest-Mismatch"), Alternates: parseLinks(u, resp.Header.Values("Link"))}
		if se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden {
			return nil, t.refused(ctx, se, u, resp, hdr, tok, withheld)
		}
		return nil, se
	}
	return resp, nil
}

func (t *HTTPTransport) redirect(from *url.URL, resp *http.Response) error {
	re := &RedirectError{From: from, Code: resp.StatusCode, Alternates: parseLinks(from, resp.Header.Values("Link"))}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == metalinkType {
		if alts, err := parseMetalink(from, resp.Body); err == nil {
			re.Alternates = append(re.Alternates, alts...)
		}
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		if len(re.Alternates) == 0 {
			return &StatusError{Method: resp.Request.Method, URL: Redact(from), Code: resp.StatusCode, Msg: "redirect without Location"}
		}
		re.Location, re.Alternates = re.Alternates[0], re.Alternates[1:]
		return re
	}
	lu, err := url.Parse(loc)
	if err != nil {
		return fmt.Errorf("%s: bad Location %q: %w", Redact(from), loc, err)
	}
	re.Location = from.ResolveReference(lu)
	return re
}

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// wantDigest builds a Want-Digest value preferring the algorithms in order.
func wantDigest(algs []string) string {
	var b strings.Builder
	for i, a := range algs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a)
		if i > 0 {
			fmt.Fprintf(&b, ";q=%.1f", max(0.1, 1-0.2*float64(i)))
		}
	}
	return b.String()
}

// parseServedRange reads a 206's Content-Range, also as XRootD 5.5.3's
// XrdHttp writes it: the range asked for, not the range sent, when it
// runs past the end of the file ("bytes 0-8388607/5242957" with the
// file's 5242957 bytes in the body; "bytes 9437184-15728639/5242957",
// and nothing, for a range past the end, which RFC 9110 answers 416).
// The first is read as the bytes up to the end (XrdHttp's body may stop
// short of them: the retry asks for the rest); the second reports
// pastEnd.
func parseServedRange(v string, contentLength int64) (off, n, size int64, pastEnd bool, err error) {
	off, n, size, err = parseRangeResp([]byte(v))
	if err == nil {
		return off, n, size, false, nil
	}
	var first, last, total int64
	if _, serr := fmt.Sscanf(strings.TrimSpace(v), "bytes %d-%d/%d", &first, &last, &total); serr != nil || first < 0 || last < first || total < 0 {
		return 0, 0, 0, false, err
	}
	switch {
	case first >= total:
		return first, 0, total, true, err
	case last >= total:
		// Only the bytes up to the end are taken (exactReader); a body
		// that ends before them is an unexpected EOF, and the retry
		// asks for what is left, within the file (see fetch).
		return first, total - first, total, false, nil
	}
	return 0, 0, 0, false, err
}

// infoFrom reads what a GET or HEAD answer says about the file.
func infoFrom(u *url.URL, resp *http.Response) Info {
	in := Info{URL: u.String(), Name: lastSeg(u.Path), Size: -1}
	h := resp.Header
	in.ETag = h.Get("ETag")
	if t, err := http.ParseTime(h.Get("Last-Modified")); err == nil {
		in.ModTime = t
	}
	in.ByteRanges = strings.Contains(h.Get("Accept-Ranges"), "bytes") || resp.StatusCode == http.StatusPartialContent
	if resp.StatusCode == http.StatusPartialContent {
		if _, _, total, _, err := parseServedRange(h.Get("Content-Range"), resp.ContentLength); err == nil {
			in.Size = total
		}
	} else if resp.ContentLength >= 0 {
		in.Size = resp.ContentLength
	}
	sums := map[string][]byte{}
	if d := h.Get("Digest"); d != "" {
		if m, err := checksum.ParseDigest(d); err == nil {
			for k, v := range m {
				sums[k] = v
			}
		}
	}
	if d := h.Get("Repr-Digest"); d != "" {
		if m, err := checksum.ParseReprDigest(d); err == nil {
			for k, v := range m {
				sums[k] = v
			}
		}
	}
	if len(sums) > 0 {
		in.Sums = sums
	}
	in.Alternates = parseLinks(u, h.Values("Link"))
	return in
}

// Stat describes u with a HEAD (or PROPFIND when dir is set).
func (t *HTTPTransport) Stat(ctx context.Context, u *url.URL, want []string, dir bool) (Info, error) {
	if dir {
		in, err := t.statDAV(ctx, u, len(want) > 0)
		var se *StatusError
		if !errors.As(err, &se) || (se.Code != http.StatusMethodNotAllowed && se.Code != http.StatusNotImplemented) {
			return in, err
		}
		// A plain web server: HEAD below.
	}
	hdr := http.Header{}
	if len(want) > 0 {
		hdr.Set("Want-Digest", wantDigest(want))
	}
	resp, err := t.do(ctx, http.MethodHead, u, nil, 0, hdr)
	if err != nil {
		return Info{}, err
	}
	resp.Body.Close()
	in := infoFrom(u, resp)
	if in.Size < 0 {
		return in, fmt.Errorf("HEAD %s: %w", Redact(u), errNoLength)
	}
	if in.ETag == "" && in.ModTime.IsZero() && !dir {
		// No validator at all (XrdHttp answers HEAD so): a cache could
		// not tell a replaced file of the same size. WebDAV servers give
		// the mtime in PROPFIND.
		if din, err := t.statDAV(ctx, u, false); err == nil && !din.IsDir && din.Size == in.Size {
			in.ModTime, in.ETag = din.ModTime, din.ETag
		}
	}
	return in, nil
}

// errNoLength: a HEAD answer without Content-Length (the file's size is
// unknown; a GET may still stream it to its end).
var errNoLength = errors.New("answer has no Content-Length")

// Read does a GET (ranged unless the whole file is asked for).
func (t *HTTPTransport) Read(ctx context.Context, u *url.URL, off, n int64, want []string) (io.ReadCloser, Info, error) {
	hdr := http.Header{}
	ranged := off > 0 || n >= 0
	if ranged {
		if n == 0 {
			return io.NopCloser(strings.NewReader("")), Info{Size: -1}, nil
		}
		if n < 0 {
			hdr.Set("Range", fmt.Sprintf("bytes=%d-", off))
		} else {
			hdr.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		}
	}
	if len(want) > 0 {
		hdr.Set("Want-Digest", wantDigest(want))
	}
	resp, err := t.do(ctx, http.MethodGet, u, nil, 0, hdr)
	if err != nil {
		return nil, Info{}, err
	}
	in := infoFrom(u, resp)
	body := resp.Body
	switch resp.StatusCode {
	case http.StatusPartialContent:
		first, got, _, pastEnd, err := parseServedRange(resp.Header.Get("Content-Range"), resp.ContentLength)
		if pastEnd && first == off {
			resp.Body.Close()
			return nil, in, &StatusError{Method: http.MethodGet, URL: Redact(u), Code: http.StatusRequestedRangeNotSatisfiable,
				Msg: "the range starts past the end of the file (Content-Range " + resp.Header.Get("Content-Range") + ")"}
		}
		if err != nil || first != off || (n >= 0 && got > n) {
			resp.Body.Close()
			return nil, in, fmt.Errorf("GET %s: asked for %s, server sent Content-Range %q", Redact(u), hdr.Get("Range"), resp.Header.Get("Content-Range"))
		}
		if n < 0 {
			n = got
		}
	case http.StatusOK:
		if ranged {
			// The server ignores Range: skip to off when it is near,
			// else refuse (ErrNoRanges) rather than read all before it.
			in.ByteRanges = false
			if off > maxSkip {
				body.Close()
				return nil, in, fmt.Errorf("GET %s: asked for bytes from %d, the server sent the whole file: %w", Redact(u), off, ErrNoRanges)
			}
			if _, err := io.CopyN(io.Discard, body, off); err != nil {
				body.Close()
				return nil, in, fmt.Errorf("GET %s: skipping to %d: %w", Redact(u), off, noEOF(err))
			}
		}
		if n < 0 {
			n = resp.ContentLength - off
		}
	default:
		resp.Body.Close()
		return nil, in, fmt.Errorf("GET %s: unexpected status %d", Redact(u), resp.StatusCode)
	}
	if n < 0 {
		// No length anywhere (chunked 200): read to EOF.
		return body, in, nil
	}
	return &exactReader{r: body, c: body, left: n}, in, nil
}

// exactReader yields exactly left bytes or io.ErrUnexpectedEOF.
type exactReader struct {
	r    io.Reader
	c    io.Closer
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if e.left == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

func (e *exactReader) Close() error { return e.c.Close() }

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Write PUTs the body. Large bodies go with Expect: 100-continue, so a
// redirect or a refusal costs no upload.
func (t *HTTPTransport) Write(ctx context.Context, u *url.URL, body BodyFunc, size int64, o WriteOptions) error {
	hdr := writeHeader(o)
	if size > 1<<20 {
		hdr.Set("Expect", "100-continue")
	}
	rc, err := body()
	if err != nil {
		return err
	}
	defer rc.Close()
	resp, err := t.do(ctx, http.MethodPut, u, rc, size, hdr)
	if err != nil {
		return err
	}
	if o.Stored != nil {
		o.Stored(infoFrom(u, resp))
	}
	return discard(resp.Body)
}

func writeHeader(o WriteOptions) http.Header {
	hdr := http.Header{"Content-Type": {"application/octet-stream"}}
	if o.NoReplace {
		hdr.Set("If-None-Match", "*")
	}
	var ds []string
	for alg, sum := range o.Checksums {
		ds = append(ds, checksum.DigestValue(alg, sum))
	}
	if len(ds) > 0 {
		hdr.Set("Digest", strings.Join(ds, ","))
	}
	return hdr
}

// CanWriteParts asks the server (OPTIONS, cached per host) whether it
// takes a file in parallel parts (docs/protocol.md).
func (t *HTTPTransport) CanWriteParts(ctx context.Context, u *url.URL) (bool, error) {
	key := u.Scheme + "://" + u.Host
	if v, ok := t.parts.Load(key); ok {
		return v.(bool), nil
	}
	resp, err := t.do(ctx, http.MethodOptions, u, nil, 0, nil)
	var re *RedirectError
	if errors.As(err, &re) {
		return false, err
	}
	if err != nil {
		// A server that refuses OPTIONS takes no parts either.
		var se *StatusError
		if errors.As(err, &se) && !se.Retryable() {
			t.parts.Store(key, false)
			return false, nil
		}
		return false, err
	}
	discard(resp.Body)
	ok := resp.Header.Get("Wanda-Parallel-Put") == "1"
	t.parts.Store(key, ok)
	return ok, nil
}

// WritePart PUTs one part with Content-Range and Wanda-Upload-Id.
func (t *HTTPTransport) WritePart(ctx context.Context, u *url.URL, id string, body BodyFunc, off, n, size int64, o WriteOptions) (bool, error) {
	hdr := writeHeader(o)
	hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size))
	hdr.Set("Wanda-Upload-Id", id)
	rc, err := body()
	if err != nil {
		return false, err
	}
	defer rc.Close()
	resp, err := t.do(ctx, http.MethodPut, u, rc, n, hdr)
	if err != nil {
		return false, err
	}
	discard(resp.Body)
	done := resp.StatusCode != http.StatusAccepted
	if done && o.Stored != nil {
		o.Stored(infoFrom(u, resp))
	}
	return done, nil
}

// Mkdir sends MKCOL; an existing directory answers ErrExist.
func (t *HTTPTransport) Mkdir(ctx context.Context, u *url.URL) error {
	resp, err := t.do(ctx, "MKCOL", u, nil, 0, nil)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusMethodNotAllowed {
		return fmt.Errorf("%w: %w", ErrExist, err)
	}
	if err != nil {
		return err
	}
	return discard(resp.Body)
}

// Remove sends DELETE.
func (t *HTTPTransport) Remove(ctx context.Context, u *url.URL) error {
	resp, err := t.do(ctx, http.MethodDelete, u, nil, 0, nil)
	if err != nil {
		return err
	}
	return discard(resp.Body)
}

// discard reads what is left of a short answer's body ("201 Created") and
// closes it. A body closed unread costs its connection (net/http does not
// reuse it), so that every small upload or MKCOL of a tree would open a
// new one.
func discard(body io.ReadCloser) error {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	return body.Close()
}

// Checksum asks with HEAD and Want-Digest.
func (t *HTTPTransport) Checksum(ctx context.Context, u *url.URL, alg string) ([]byte, error) {
	resp, err := t.do(ctx, http.MethodHead, u, nil, 0, http.Header{"Want-Digest": {alg}})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	in := infoFrom(u, resp)
	if sum, ok := in.Sums[alg]; ok {
		return sum, nil
	}
	return nil, fmt.Errorf("HEAD %s: server gave no %s checksum", Redact(u), alg)
}

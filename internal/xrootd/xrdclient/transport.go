package xrdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// DefaultPort is XRootD's port, used when a URL names none.
const DefaultPort = "1094"

// Options configure a Transport. The zero value is usable: New fills what
// is left zero.
type Options struct {
	// User is the login name (XRootD keeps 8 bytes of it); default $USER,
	// else "wanda". Group is the group name sent with unix
	// authentication; default the process's group, else "nogroup".
	User, Group string
	// PID is sent at login; default the process's.
	PID int
	// DialTimeout bounds a TCP connect (default 30 s). The rest of the
	// login, like every request, is bounded by the caller's context (the
	// engine's stall watchdog).
	DialTimeout time.Duration
	// Control, when set, is the dialer's net.Dialer.Control: it sees
	// every address connected to, resolved, and may refuse it (a
	// third-party copy's allow list).
	Control func(network, address string, c syscall.RawConn) error
	// MaxIdlePerHost bounds the idle connections kept per server
	// (default 16); IdleTimeout is how long one is kept (default 60 s).
	MaxIdlePerHost int
	IdleTimeout    time.Duration
	// ReadChunk is the size of one kXR_read (default 4 MiB), and
	// ReadAhead how many a stream keeps in flight (default 2): the next
	// request waits in the server's socket while the current one is
	// answered, so a stream never idles a round trip between chunks. A
	// server that answers a stream's requests interleaved (wanda's does,
	// several workers per connection) makes the later one's frames wait
	// in memory: a stream holds at most about one ReadChunk besides what
	// the caller reads.
	ReadChunk int
	ReadAhead int
	// ReadMemory bounds what all the readers of the transport keep in
	// flight (default 32 MiB): each one's requests are ReadMemory shared
	// among the readers open at once (between 1 MiB and ReadChunk), so
	// that 16 streams hold about as much as 4.
	ReadMemory int
	// WriteChunk is the size of one kXR_write (default 8 MiB); WriteAhead
	// how many are sent before the first is acknowledged (default 2).
	WriteChunk int
	WriteAhead int
	// HoldOpen is how long a file read stays open on its connection for
	// the next Read or ReadV of it, which then skips kXR_open (default
	// 5 s; negative: closed at once). See held.go.
	HoldOpen time.Duration
	// TLS configures roots:// connections (and root:// ones a server
	// switches to TLS); nil: the system's roots, the URL's host name.
	TLS *tls.Config
	// Token, when set, gives the bearer token sent with the ztn security
	// protocol when a server asks for it (only over TLS); it is called
	// at each login, so a token file re-read by the caller carries a
	// long job on. "" means no token.
	Token func() (string, error)
	Log   *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.User == "" {
		o.User = os.Getenv("USER")
	}
	if o.User == "" {
		if u, err := user.Current(); err == nil {
			o.User = u.Username
		}
	}
	if o.User == "" {
		o.User = "wanda"
	}
	if o.Group == "" {
		if g, err := user.LookupGroupId(strconv.Itoa(os.Getegid())); err == nil {
			o.Group = g.Name
		} else {
			o.Group = "nogroup"
		}
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 30 * time.Second
	}
	if o.MaxIdlePerHost <= 0 {
		o.MaxIdlePerHost = 16
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.ReadChunk <= 0 {
		o.ReadChunk = 4 << 20
	}
	if o.ReadMemory <= 0 {
		o.ReadMemory = 32 << 20
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = 2
	}
	if o.WriteChunk <= 0 {
		o.WriteChunk = 8 << 20
	}
	if o.WriteAhead <= 0 {
		o.WriteAhead = 2
	}
	if o.HoldOpen == 0 {
		o.HoldOpen = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Transport is the root:// transport of the client engine (see
// client.Transport): one XRootD request sequence per call, answers mapped
// to the engine's errors (*client.RedirectError for kXR_redirect, the
// client.Err* sentinels and retryable *Error for kXR_error), with
// kXR_wait honoured on the same connection. Safe for concurrent use.
type Transport struct {
	opts    Options
	pool    pool
	readers atomic.Int32 // open readers (for their chunk size)
}

var _ client.Transport = (*Transport)(nil)

// New returns a transport.
func New(opts Options) *Transport {
	return &Transport{opts: opts.withDefaults()}
}

// Register makes a new default transport c's root:// and roots://
// transport.
func Register(c *client.Client) *Transport {
	t := New(Options{Log: c.Log})
	c.Register("root", t)
	c.Register("roots", t)
	return t
}

// urlInfo is a request's target: the server and the path as sent.
type urlInfo struct {
	u    *url.URL
	addr string // host:port
	path string // "/a/b?cgi" as the server gets it
	tls  bool   // roots://
	key  string // the connection pool's: addr, "tls:" + addr for roots://
}

// target reads a root:// URL. root://host//a/b and root://host/a/b both
// name /a/b (XRootD's own client reads them so).
func target(u *url.URL) (*urlInfo, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%s: no host", client.Redact(u))
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = DefaultPort
	}
	p := "/" + strings.TrimLeft(u.Path, "/")
	if strings.ContainsAny(p, "\x00\n") {
		return nil, fmt.Errorf("%s: path with a NUL or a newline", client.Redact(u))
	}
	if q := cgi(u.RawQuery); q != "" {
		p += "?" + q
	}
	ti := &urlInfo{u: u, addr: net.JoinHostPort(host, port), path: p, tls: u.Scheme == "roots"}
	ti.key = ti.addr
	if ti.tls {
		ti.key = "tls:" + ti.addr
	}
	return ti, nil
}

// cgi returns a URL's query as XRootD reads opaque information: as sent,
// except the engine's `tried` list of failed hosts, which XRootD's
// redirector reads unescaped ("tried=a:1094,b:1094", not %2C and %3A).
func cgi(raw string) string {
	if !strings.Contains(raw, "tried=") {
		return raw
	}
	kvs := strings.Split(raw, "&")
	for i, kv := range kvs {
		if v, ok := strings.CutPrefix(kv, "tried="); ok {
			if uv, err := url.QueryUnescape(v); err == nil && !strings.ContainsAny(uv, "&? \x00\n") {
				kvs[i] = "tried=" + uv
			}
		}
	}
	return strings.Join(kvs, "&")
}

// redirectURL builds the URL a kXR_redirect points to: the same path on
// the new host, with the opaque information ("?cgi", and a "?token"
// after it) the redirect carries added to the query.
func redirectURL(from *url.URL, r xrootd.RedirectResponse) (*url.URL, error) {
	if r.Port < 0 {
		// A URL (only sent to clients that said they take one).
		u, err := url.Parse(r.Host)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("kXR_redirect to %q: %w", r.Host, errProtocol)
		}
		return u, nil
	}
	if strings.ContainsFunc(r.Host, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return nil, fmt.Errorf("kXR_redirect to %q: %w", r.Host, errProtocol)
	}
	host, cgi, _ := strings.Cut(r.Host, "?")
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" || strings.ContainsAny(host, "/#") {
		return nil, fmt.Errorf("kXR_redirect to %q: %w", r.Host, errProtocol)
	}
	port := strconv.Itoa(int(r.Port))
	if r.Port == 0 {
		port = DefaultPort
	}
	loc := &url.URL{Scheme: from.Scheme, Host: net.JoinHostPort(host, port), Path: "//" + strings.TrimLeft(from.Path, "/")}
	loc.RawQuery = mergeCGI(from.RawQuery, strings.ReplaceAll(cgi, "?", "&"))
	// What the engine cannot read back (a host that is no host name nor
	// address) is refused here.
	if back, err := url.Parse(loc.String()); err != nil || back.Hostname() != host {
		return nil, fmt.Errorf("kXR_redirect to %q: %w", r.Host, errProtocol)
	}
	return loc, nil
}

// mergeCGI adds the key=value pairs of b to a, those of b replacing a's
// of the same key; values are kept as they were sent (not re-encoded).
func mergeCGI(a, b string) string {
	if b == "" {
		return a
	}
	var out []string
	keys := map[string]bool{}
	for _, kv := range strings.Split(b, "&") {
		if kv != "" {
			k, _, _ := strings.Cut(kv, "=")
			keys[k] = true
		}
	}
	for _, kv := range strings.Split(a, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if kv != "" && !keys[k] {
			out = append(out, kv)
		}
	}
	for _, kv := range strings.Split(b, "&") {
		if kv != "" {
			out = append(out, kv)
		}
	}
	return strings.Join(out, "&")
}

// do runs one request on a pooled connection and returns its whole answer.
func (t *Transport) do(ctx context.Context, ti *urlInfo, id xrootd.RequestID, body [16]byte, data []byte) ([]byte, error) {
	var out []byte
	err := t.session(ctx, ti, func(c *conn) error {
		var err error
		out, err = c.call(ctx, id, body, data)
		return err
	})
	return out, annotate(err, id.String(), ti)
}

// info turns a stat answer into the engine's Info.
func info(ti *urlInfo, st xrootd.StatInfo) client.Info {
	return client.Info{
		Name:       path.Base("/" + strings.TrimLeft(ti.u.Path, "/")),
		URL:        ti.u.String(),
		Size:       st.Size,
		ModTime:    time.Unix(st.MTime, 0),
		IsDir:      st.Flags&xrootd.StatIsDir != 0,
		ByteRanges: true,
	}
}

// Stat sends kXR_stat and, when want names checksums, kXR_query for the
// server's checksum (a server without one answers without Sums).
func (t *Transport) Stat(ctx context.Context, u *url.URL, want []string, dir bool) (client.Info, error) {
	ti, err := target(u)
	if err != nil {
		return client.Info{}, err
	}
	b, err := t.do(ctx, ti, xrootd.ReqStat, xrootd.StatRequest{}.Body(), []byte(ti.path))
	if err != nil {
		return client.Info{}, err
	}
	st, err := xrootd.ParseStat(string(b))
	if err != nil {
		return client.Info{}, fmt.Errorf("kXR_stat %s: %w", client.Redact(u), err)
	}
	in := info(ti, st)
	if len(want) > 0 && !in.IsDir {
		sums, err := t.sums(ctx, ti, want)
		if err != nil {
			return in, err
		}
		if len(sums) > 0 {
			in.Sums = sums
		}
	}
	return in, nil
}

// sums asks for the server's checksum: first its default algorithm, then
// each wanted one by name (cks.type) until one is known to both. A server
// that keeps none is no error; a connection that fails is.
func (t *Transport) sums(ctx context.Context, ti *urlInfo, want []string) (map[string][]byte, error) {
	alg, sum, err := t.query(ctx, ti, "")
	if err != nil && !isAnswer(err) {
		return nil, err
	}
	if err == nil {
		for _, w := range want {
			if w == alg {
				return map[string][]byte{alg: sum}, nil
			}
		}
	}
	for _, w := range want {
		if w == alg {
			continue
		}
		a, s, err := t.query(ctx, ti, w)
		if err != nil && !isAnswer(err) {
			return nil, err
		}
		if err == nil && a == w {
			return map[string][]byte{a: s}, nil
		}
	}
	return nil, nil
}

// isAnswer reports whether err is the server's considered answer (a
// kXR_error) rather than a failure to get one.
func isAnswer(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// query sends kXR_query kXR_Qcksum for ti, with algorithm alg ("": the
// server's default), and decodes "<alg> <hex>".
func (t *Transport) query(ctx context.Context, ti *urlInfo, alg string) (string, []byte, error) {
	p := ti.path
	if alg != "" {
		sep := "?"
		if strings.Contains(p, "?") {
			sep = "&"
		}
		p += sep + "cks.type=" + alg
	}
	b, err := t.do(ctx, ti, xrootd.ReqQuery, xrootd.QueryRequest{Type: xrootd.QueryChecksum}.Body(), []byte(p))
	if err != nil {
		return "", nil, err
	}
	a, v, err := xrootd.ParseChecksum(b)
	if err != nil {
		return "", nil, fmt.Errorf("kXR_query checksum %s: %w", client.Redact(ti.u), err)
	}
	canon := checksum.Canonical(a)
	if canon == "" {
		return a, nil, fmt.Errorf("kXR_query checksum %s: unknown algorithm %q", client.Redact(ti.u), a)
	}
	sum, err := decodeHex(v)
	if err != nil {
		return "", nil, fmt.Errorf("kXR_query checksum %s: %q: %w", client.Redact(ti.u), v, err)
	}
	return canon, sum, nil
}

// Checksum asks the server for u's checksum with algorithm alg.
func (t *Transport) Checksum(ctx context.Context, u *url.URL, alg string) ([]byte, error) {
	ti, err := target(u)
	if err != nil {
		return nil, err
	}
	a, sum, err := t.query(ctx, ti, alg)
	if err != nil {
		return nil, err
	}
	if a != alg {
		return nil, fmt.Errorf("kXR_query checksum %s: asked for %s, the server answered %s", client.Redact(u), alg, a)
	}
	return sum, nil
}

// List sends kXR_dirlist with kXR_dstat: names and stat lines in one
// answer. A file lists itself.
func (t *Transport) List(ctx context.Context, u *url.URL) ([]client.Info, error) {
	ti, err := target(u)
	if err != nil {
		return nil, err
	}
	b, err := t.do(ctx, ti, xrootd.ReqDirlist, xrootd.DirlistBody(xrootd.DirlistDStat), []byte(ti.path))
	if err != nil {
		var e *Error
		if errors.As(err, &e) && !errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrForbidden) {
			// Not a directory, perhaps: a file lists itself.
			if in, serr := t.Stat(ctx, u, nil, false); serr == nil && !in.IsDir {
				return []client.Info{in}, nil
			}
		}
		return nil, err
	}
	entries, err := xrootd.ParseDirlist(b)
	if err != nil {
		return nil, fmt.Errorf("kXR_dirlist %s: %w", client.Redact(u), err)
	}
	out := make([]client.Info, 0, len(entries))
	for _, e := range entries {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
			continue
		}
		v := *u
		v.Path = strings.TrimSuffix(u.Path, "/") + "/" + e.Name
		v.RawPath = ""
		in := client.Info{Name: e.Name, URL: v.String(), Size: -1, ByteRanges: true}
		if e.Stat != nil {
			in = info(&urlInfo{u: &v}, *e.Stat)
		}
		out = append(out, in)
	}
	return out, nil
}

// Mkdir sends kXR_mkdir (without kXR_mkdirpath: the engine creates parents
// itself); an existing directory answers client.ErrExist.
func (t *Transport) Mkdir(ctx context.Context, u *url.URL) error {
	ti, err := target(u)
	if err != nil {
		return err
	}
	body := xrootd.MkdirRequest{Mode: xrootd.ModeFromPerm(0o755)}.Body()
	_, err = t.do(ctx, ti, xrootd.ReqMkdir, body, []byte(ti.path))
	if err != nil && !errors.Is(err, client.ErrExist) && isAnswer(err) {
		// XRootD answers an existing directory with a generic error:
		// say ErrExist when it is one.
		if in, serr := t.Stat(ctx, u, nil, false); serr == nil && in.IsDir {
			return fmt.Errorf("%w: %w", client.ErrExist, err)
		}
	}
	return err
}

// Remove sends kXR_rm; a directory is removed with all below it
// (kXR_dirlist, kXR_rm and kXR_rmdir), as HTTP's DELETE of a collection.
func (t *Transport) Remove(ctx context.Context, u *url.URL) error {
	ti, err := target(u)
	if err != nil {
		return err
	}
	_, err = t.do(ctx, ti, xrootd.ReqRm, [16]byte{}, []byte(ti.path))
	if err == nil || !isAnswer(err) || errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrForbidden) {
		return err
	}
	in, serr := t.Stat(ctx, u, nil, false)
	if serr != nil || !in.IsDir {
		return err
	}
	return t.removeTree(ctx, u)
}

func (t *Transport) removeTree(ctx context.Context, u *url.URL) error {
	entries, err := t.List(ctx, u)
	if err != nil {
		return err
	}
	for _, e := range entries {
		eu, err := url.Parse(e.URL)
		if err != nil {
			return err
		}
		if e.IsDir {
			err = t.removeTree(ctx, eu)
		} else {
			eti, terr := target(eu)
			if terr != nil {
				return terr
			}
			_, err = t.do(ctx, eti, xrootd.ReqRm, [16]byte{}, []byte(eti.path))
		}
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return err
		}
	}
	ti, err := target(u)
	if err != nil {
		return err
	}
	_, err = t.do(ctx, ti, xrootd.ReqRmdir, [16]byte{}, []byte(ti.path))
	return err
}

// decodeHex reads a checksum's hex digits (an odd count gets a leading 0:
// some servers drop adler32's leading zero).
func decodeHex(s string) ([]byte, error) {
	if len(s)%2 == 1 {
		s = "0" + s
	}
	out := make([]byte, len(s)/2)
	for i := range out {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, err
		}
		out[i] = byte(v)
	}
	return out, nil
}

var _ client.Mover = (*Transport)(nil)

// Move sends kXR_mv ("from to", from's length in the request body); the
// destination's opaque part, if any, is left out.
func (t *Transport) Move(ctx context.Context, from, to *url.URL) error {
	fi, err := target(from)
	if err != nil {
		return err
	}
	ti, err := target(to)
	if err != nil {
		return err
	}
	dst, _, _ := strings.Cut(ti.path, "?")
	data := []byte(fi.path + " " + dst)
	_, err = t.do(ctx, fi, xrootd.ReqMv, xrootd.MvBody(len(fi.path)), data)
	return err
}

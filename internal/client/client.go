// Package client is wanda's transfer engine: it reads and writes files of
// any wanda, XRootD, dCache or plain HTTP server, with parallel streams,
// vector reads, retries, failover to replicas, resume and end-to-end
// checksums. The CLI verbs (cp, get, put, ls...) are thin shells around it,
// and the later roles embed it (the cache's upstream, the transfer service,
// the FUSE mount); it imports nothing of the server side.
//
// The engine sits above a small Transport interface (one request per call,
// no policy): HTTP now, root:// later. Everything a user calls "robust" is
// written once, here: Client.run resolves a URL through redirects (cached
// for Policy.RouteTTL), retries with backoff and jitter, honours
// Retry-After, fails over to the alternates a server advertised and asks a
// redirector again excluding the hosts that failed (`tried=` as XRootD
// does), and the stall watchdog ends requests that stop moving bytes.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Client is safe for concurrent use.
type Client struct {
	Policy Policy
	Log    *slog.Logger
	// HTTP is the transport of http:// and https:// URLs.
	HTTP *HTTPTransport

	mu         sync.Mutex
	transports map[string]Transport
	routes     map[string]*route
}

// New returns a client with the default policy and the HTTP transport.
func New() *Client {
	c := &Client{
		Policy:     DefaultPolicy,
		Log:        slog.New(slog.DiscardHandler),
		HTTP:       NewHTTPTransport(nil),
		transports: map[string]Transport{},
		routes:     map[string]*route{},
	}
	c.transports["http"] = c.HTTP
	c.transports["https"] = c.HTTP
	return c
}

// Clone returns a client with the same transports (their connections and
// credentials are shared) and a copy of the policy, to be set apart: the
// FUSE mount's block cache tries twice where its metadata and uploads
// follow the user's --retries. Its redirect cache starts empty.
func (c *Client) Clone() *Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &Client{Policy: c.Policy, Log: c.Log, HTTP: c.HTTP, transports: map[string]Transport{}, routes: map[string]*route{}}
	for k, t := range c.transports {
		n.transports[k] = t
	}
	return n
}

// Register makes t the transport of URLs with this scheme.
func (c *Client) Register(scheme string, t Transport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transports[scheme] = t
}

func (c *Client) transport(u *url.URL) (Transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.transports[u.Scheme]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("%s: %w (%q)", Redact(u), ErrNoTransport, u.Scheme)
}

// IsRemote reports whether s is a URL this client has a transport for.
func (c *Client) IsRemote(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	_, err = c.transport(u)
	return err == nil
}

// route is where a URL's requests go: the server a redirect chain ended
// at, the alternates advertised on the way, and the redirector that
// answered (to ask again, excluding failed hosts).
type route struct {
	target     *url.URL
	alternates []*url.URL
	via        *url.URL // nil when u was not redirected
	expires    time.Time
}

func (c *Client) cachedRoute(key string) *route {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.routes[key]
	if r != nil && time.Now().After(r.expires) {
		delete(c.routes, key)
		return nil
	}
	return r
}

func (c *Client) storeRoute(key string, r *route) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.routes) > 10000 {
		now := time.Now()
		for k, v := range c.routes {
			if now.After(v.expires) {
				delete(c.routes, k)
			}
		}
	}
	c.routes[key] = r
}

func (c *Client) forgetRoute(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.routes, key)
}

// Call describes one engine operation for run.
type call struct {
	// op does one try against target with transport t.
	op func(ctx context.Context, t Transport, target *url.URL) error
	// progressed reports whether the last try moved data; such a try
	// does not use up the retry budget.
	progressed func() bool
	// learned, if set, returns alternates the last try's answer
	// advertised (Link headers on a 200).
	learned func() []*url.URL
	// stats receives what happened.
	stats *opStats
	// write: op changes the remote side (PUT, MKCOL, DELETE). Its route is
	// cached apart from reads': a redirector sends reads to any replica
	// but writes to a writable member.
	write bool
	// timed: op runs its own stall watchdog (data transfers, whose
	// watchdog follows the bytes); others get one per try from run.
	timed bool
}

// opStats tells a caller how an operation went.
type opStats struct {
	Retries int
	Server  string // host that served the last (successful) try
	Last    error  // last retried error, for the report
}

// run executes an operation on u with redirects, retries and failover.
func (c *Client) run(ctx context.Context, u *url.URL, cl call) error {
	p := c.Policy.withDefaults()
	key := u.String()
	if cl.write {
		key = "write " + key
	}
	tried := map[string]bool{}
	var alternates []*url.URL
	var via *url.URL
	attempt := 0
	for {
		target, fromCache := u, false
		if r := c.cachedRoute(key); r != nil && !tried[r.target.Host] {
			// A copy: parallel streams share the cached route.
			target, alternates, via, fromCache = r.target, append([]*url.URL(nil), r.alternates...), r.via, true
		} else if len(tried) > 0 {
			target = pickUntried(alternates, tried)
			if target == nil && via != nil {
				target = withTried(via, tried)
			}
			if target == nil {
				target = u
			}
		}
		tryCtx := ctx
		var wd *watchdog
		stop := func() {}
		if !cl.timed {
			// Operations without their own watchdog (stat, list, mkdir...)
			// get one per try: a server that stops answering is left.
			tryCtx, wd, stop = p.watch(ctx)
		}
		final, alts, redirector, err := c.follow(tryCtx, target, p.MaxRedirects, cl.op)
		if wd != nil {
			err = stallErr(tryCtx, wd, err)
		}
		stop()
		if redirector != nil {
			via = redirector
		}
		if len(alts) > 0 {
			alternates = mergeURLs(alternates, c.usable(alts))
		}
		if cl.learned != nil {
			alternates = mergeURLs(alternates, c.usable(cl.learned()))
		}
		if final != nil && cl.stats != nil {
			cl.stats.Server = final.Host
		}
		if err == nil || servedWell(err) {
			// A fresh answer is kept for RouteTTL from when it came (using
			// a cached route does not extend it: the redirector is asked
			// again in time), and so are the alternates a server advertised
			// without redirecting, for the failover of later calls.
			if final != nil && !fromCache && (final.String() != u.String() || len(alternates) > 0) {
				c.storeRoute(key, &route{target: final, alternates: alternates, via: via, expires: time.Now().Add(p.RouteTTL)})
			}
			if err == nil {
				return nil
			}
		}
		class := Classify(err)
		if class == Fatal {
			if fromCache && target.String() != u.String() && errors.Is(err, ErrNotFound) {
				// The cached replica lost the file: ask afresh once.
				c.forgetRoute(key)
				if !tried[""] {
					tried[""] = true
					continue
				}
			}
			return err
		}
		if cl.progressed != nil && cl.progressed() {
			attempt = 0
		}
		attempt++
		if cl.stats != nil {
			cl.stats.Last = err
		}
		if attempt >= p.Attempts {
			return fmt.Errorf("giving up after %d tries: %w", attempt, err)
		}
		if cl.stats != nil {
			cl.stats.Retries++ // counted when it happens: a try given up on is none
		}
		if class == Failover && final != nil {
			tried[final.Host] = true
			c.forgetRoute(key)
		}
		wait := p.backoff(attempt, retryAfter(err))
		c.Log.Debug("retrying", "url", Redact(u), "try", attempt+1, "wait", wait, "err", err)
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		if len(tried) > 0 && pickUntried(alternates, tried) == nil && via == nil {
			// Nowhere else to go: the same server again, later.
			clear(tried)
		}
	}
}

// servedWell reports an operation that ended without success but with
// the server doing its part: a range cut short by the engine, a
// speculative range past the end of the file. Its route is as good as a
// success's.
func servedWell(err error) bool {
	return errors.Is(err, errCut) || isStatus(err, http.StatusRequestedRangeNotSatisfiable)
}

// follow runs op on target, following redirects. It returns the URL that
// answered last, the alternates the chain advertised, and the first
// server that redirected (the redirector).
func (c *Client) follow(ctx context.Context, target *url.URL, maxHops int, op func(context.Context, Transport, *url.URL) error) (final *url.URL, alts []*url.URL, redirector *url.URL, err error) {
	for hop := 0; ; hop++ {
		t, err := c.transport(target)
		if err != nil {
			return target, alts, redirector, err
		}
		err = op(ctx, t, target)
		var re *RedirectError
		if !errors.As(err, &re) {
			return target, alts, redirector, err
		}
		if hop >= maxHops {
			return target, alts, redirector, fmt.Errorf("%s: more than %d redirects", Redact(target), maxHops)
		}
		if redirector == nil {
			redirector = stripTried(target)
		}
		alts = mergeURLs(alts, re.Alternates)
		c.Log.Debug("redirected", "from", Redact(target), "to", Redact(re.Location), "alternates", len(re.Alternates))
		target = re.Location
	}
}

// usable keeps the URLs this client has a transport for: a replica
// advertised as root:// is no use to a client without root://.
func (c *Client) usable(us []*url.URL) []*url.URL {
	out := us[:0:0]
	for _, u := range us {
		if _, err := c.transport(u); err == nil {
			out = append(out, u)
		}
	}
	return out
}

func pickUntried(us []*url.URL, tried map[string]bool) *url.URL {
	for _, u := range us {
		if !tried[u.Host] {
			return u
		}
	}
	return nil
}

func mergeURLs(a, b []*url.URL) []*url.URL {
	for _, u := range b {
		dup := false
		for _, x := range a {
			if x.String() == u.String() {
				dup = true
				break
			}
		}
		if !dup {
			a = append(a, u)
		}
	}
	return a
}

// withTried asks a redirector again, naming the hosts that failed in the
// `tried` query parameter (XRootD's convention; wanda's redirector
// honours it, docs/protocol.md).
func withTried(u *url.URL, tried map[string]bool) *url.URL {
	v := *u
	q := v.Query()
	var hosts []string
	for h := range tried {
		if h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return u
	}
	q.Set("tried", strings.Join(hosts, ","))
	v.RawQuery = q.Encode()
	return &v
}

func stripTried(u *url.URL) *url.URL {
	v := *u
	q := v.Query()
	if q.Has("tried") {
		q.Del("tried")
		v.RawQuery = q.Encode()
	}
	return &v
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: not a URL with a host", s)
	}
	return u, nil
}

func lastSeg(p string) string {
	p = strings.TrimSuffix(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

package redirector

import (
	"crypto/subtle"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Handler is the redirector's HTTP front-end: the federation API under
// /api/v1/ and a redirect for every other path.
func (r *Redirector) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch p := req.URL.Path; {
		case p == "/api/v1/members":
			r.serveMembers(w, req)
		case p == fed.WatchPath:
			r.serveWatch(w, req)
		case p == fed.EventsPath:
			r.serveEvents(w, req)
		case p == fed.DigestPath:
			r.serveDigest(w, req)
		case p == fed.ClusterPath:
			r.serveCluster(w, req)
		case p == "/api/v1/locate":
			r.serveLocate(w, req)
		case p == "/api/v1/topology":
			r.serveTopology(w, req)
		case strings.HasPrefix(p, "/api/v1/admin/"):
			r.serveAdmin(w, req, strings.TrimPrefix(p, "/api/v1/admin/"))
		default:
			r.serveData(w, req)
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, fed.Error{Version: fed.Version, Error: fmt.Sprintf(format, args...)})
}

// allowed checks a bearer token; with no token configured only loopback
// peers are allowed (a redirector reachable from outside must set one).
func allowed(req *http.Request, token string) error {
	if token != "" {
		got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
			return errors.New("missing or wrong bearer token")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return errors.New("no token is configured, so only loopback peers are allowed (set one: docs/federation.md)")
	}
	return nil
}

func (r *Redirector) serveMembers(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		writeJSON(w, http.StatusOK, r.Members())
	case http.MethodPost:
		if err := allowed(req, r.opts.Token); err != nil {
			writeErr(w, http.StatusUnauthorized, "join refused: %v", err)
			return
		}
		var m fed.Member
		if err := fed.Decode(req.Body, &m); err != nil {
			writeErr(w, http.StatusBadRequest, "%v", err)
			return
		}
		if err := m.Validate(); err != nil {
			writeErr(w, http.StatusBadRequest, "member: %v", err)
			return
		}
		if m.ID == r.opts.ID {
			writeErr(w, http.StatusBadRequest, "member %s has this redirector's own ID", m.ID)
			return
		}
		writeJSON(w, http.StatusOK, r.Heartbeat(m))
	case http.MethodDelete:
		if err := allowed(req, r.opts.Token); err != nil {
			writeErr(w, http.StatusUnauthorized, "leave refused: %v", err)
			return
		}
		id := req.URL.Query().Get("id")
		if id == "" {
			writeErr(w, http.StatusBadRequest, "leave: no id")
			return
		}
		r.Leave(id)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, DELETE")
		writeErr(w, http.StatusMethodNotAllowed, "%s not allowed on /api/v1/members", req.Method)
	}
}

// serveEvents takes a member's file notices (POST fed.EventsPath).
func (r *Redirector) serveEvents(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeErr(w, http.StatusMethodNotAllowed, "%s not allowed on %s", req.Method, fed.EventsPath)
		return
	}
	if err := allowed(req, r.opts.Token); err != nil {
		writeErr(w, http.StatusUnauthorized, "events refused: %v", err)
		return
	}
	var ev fed.Events
	if err := fed.Decode(req.Body, &ev); err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := ev.Validate(); err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	if !r.reg.knows(ev.ID, ev.Instance) {
		writeErr(w, http.StatusNotFound, "events: %s (instance %s) is not a member here", ev.ID, ev.Instance)
		return
	}
	for _, e := range ev.Events {
		r.notify(ev.ID, e.Path, e.Present, e.Seq)
	}
	w.WriteHeader(http.StatusNoContent)
}

// logicalPath cleans a request path into "/a/b" ("/" for the root).
func logicalPath(p string) (string, error) { return fed.CleanLogical(p) }

func (r *Redirector) serveLocate(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeErr(w, http.StatusMethodNotAllowed, "%s not allowed on /api/v1/locate", req.Method)
		return
	}
	v := req.URL.Query()
	p, err := logicalPath(v.Get(fed.ParamPath))
	if err != nil || v.Get(fed.ParamPath) == "" {
		writeErr(w, http.StatusBadRequest, "locate: bad or missing path %q", v.Get(fed.ParamPath))
		return
	}
	q := Query{Path: p, Scope: v.Get(fed.ParamScope), Tried: parseTried(v.Get(fed.ParamTried)), All: v.Get(fed.ParamAll) == "1" || v.Get(fed.ParamAll) == "true",
		HTTP: v.Get(fed.ParamHTTP) == "1"}
	switch q.Scope {
	case "", fed.ScopeDown, fed.ScopeUp:
	default:
		writeErr(w, http.StatusBadRequest, "locate: scope %q: want down or up", q.Scope)
		return
	}
	if h := v.Get(fed.ParamHops); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 0 || n > 64 {
			writeErr(w, http.StatusBadRequest, "locate: hops %q: want 0 to 64", h)
			return
		}
		q.Hops = n
		if n == 0 {
			writeJSON(w, http.StatusOK, fed.Located{Version: fed.Version, Path: p, Status: fed.NotFound, Errors: []string{"hop limit reached at " + r.opts.ID}})
			return
		}
	}
	if vis := v.Get(fed.ParamVisited); vis != "" {
		q.Visited = strings.Split(vis, ",")
		if len(q.Visited) > maxVisited {
			writeErr(w, http.StatusBadRequest, "locate: more than 63 visited redirectors")
			return
		}
	}
	res := r.Locate(req.Context(), q)
	writeJSON(w, http.StatusOK, fed.Located{Version: fed.Version, Path: p, Status: res.Status,
		Replicas: r.viaSelf(r.order(p, res.Replicas)), Errors: res.Errors})
}

// parseTried reads the client's list of failed hosts (host:port,...).
func parseTried(s string) map[string]bool {
	if s == "" {
		return nil
	}
	t := map[string]bool{}
	for i, h := range strings.Split(s, ",") {
		if i >= 64 {
			break
		}
		if h = strings.TrimSpace(h); h != "" {
			t[strings.ToLower(h)] = true
		}
	}
	return t
}

func (r *Redirector) serveAdmin(w http.ResponseWriter, req *http.Request, action string) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeErr(w, http.StatusMethodNotAllowed, "admin actions are POST")
		return
	}
	if err := allowed(req, r.opts.AdminToken); err != nil {
		writeErr(w, http.StatusUnauthorized, "admin refused: %v", err)
		return
	}
	var a fed.AdminRequest
	if err := fed.Decode(req.Body, &a); err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	var err error
	switch action {
	case "drain":
		err = r.Drain(a.Member, true)
	case "undrain":
		err = r.Drain(a.Member, false)
	case "remove":
		err = r.Remove(a.Member)
	case "add":
		if a.Add == nil {
			writeErr(w, http.StatusBadRequest, "add: no member description")
			return
		}
		err = r.AddStatic(*a.Add)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "add: %v", err)
			return
		}
	default:
		writeErr(w, http.StatusNotFound, "no admin action %q (drain, undrain, remove, add)", action)
		return
	}
	if errors.Is(err, errNoMember) {
		writeErr(w, http.StatusNotFound, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, r.Members())
}

// serveData answers a client's request for a logical path with a redirect.
func (r *Redirector) serveData(w http.ResponseWriter, req *http.Request) {
	p, err := logicalPath(req.URL.Path)
	if err != nil {
		http.Error(w, fmt.Sprintf("bad path %q: %v", req.URL.Path, err), http.StatusBadRequest)
		return
	}
	tried := parseTried(req.URL.Query().Get(fed.ParamTried))
	switch req.Method {
	case http.MethodGet, http.MethodHead, "PROPFIND":
		r.redirectRead(w, req, p, tried, false)
	case http.MethodPut, "MKCOL":
		r.redirectWrite(w, req, p, tried)
	case http.MethodOptions:
		if req.URL.Path == "*" {
			w.Header().Set("Allow", "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, COPY, PROPFIND")
			w.WriteHeader(http.StatusOK)
			return
		}
		r.redirectWrite(w, req, p, tried)
	case http.MethodDelete, "MOVE":
		r.redirectRead(w, req, p, tried, true)
	case "COPY":
		// A third-party copy: pulled by a member that may store the
		// file (Source), pushed by one that holds it (Destination).
		switch {
		case req.Header.Get("Source") != "":
			r.redirectWrite(w, req, p, tried)
		case req.Header.Get("Destination") != "":
			r.redirectRead(w, req, p, tried, false)
		default:
			http.Error(w, "COPY needs a Source (pull) or a Destination (push) header", http.StatusBadRequest)
		}
	default:
		w.Header().Set("Allow", "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, COPY, PROPFIND")
		http.Error(w, req.Method+" is not supported by a redirector", http.StatusMethodNotAllowed)
	}
}

// redirectRead locates p and redirects to the best replica (writable ones
// only for DELETE and MOVE, which change the file where it is).
func (r *Redirector) redirectRead(w http.ResponseWriter, req *http.Request, p string, tried map[string]bool, modify bool) {
	if !modify && ownerRead(req) {
		if reps := r.toOwner(p, tried); len(reps) > 0 {
			r.redirect(w, req, p, reps) // select: hash: to the cache cluster's owner
			return
		}
	}
	res := r.Locate(req.Context(), Query{Path: p, Tried: tried, HTTP: true})
	switch res.Status {
	case fed.NotFound:
		r.met.redirects.WithLabelValues("404").Inc()
		if u := r.cache.rootReplica(p); u != "" {
			http.Error(w, p+": held only by XRootD servers that speak no HTTP ("+u+"): read it over root://", http.StatusNotFound)
			return
		}
		http.Error(w, p+": not found in the federation", http.StatusNotFound)
		return
	case fed.Unavailable:
		r.unavailable(w, p, res.Errors)
		return
	}
	reps := r.order(p, res.Replicas)
	if strings.Contains(req.UserAgent(), fed.CacheAgent) {
		// A cache fetching: never to a cache's copy (it could be itself).
		caches := map[string]bool{}
		for _, x := range reps {
			if x.Role == fed.RoleCache {
				caches[fed.HostOf(x.URL)] = true
			}
		}
		if len(caches) > 0 {
			reps = slices.DeleteFunc(reps, func(x fed.Replica) bool { return x.Role == fed.RoleCache })
			if len(reps) == 0 {
				// Ask again without the caches (an origin may have
				// answered after them).
				for h := range tried {
					caches[h] = true
				}
				r.redirectRead(w, req, p, caches, modify)
				return
			}
		}
	}
	if modify {
		r.cache.forget(p)
		ws := writableOnly(reps)
		if len(ws) == 0 {
			r.met.redirects.WithLabelValues("403").Inc()
			http.Error(w, p+": every replica is on a read-only export", http.StatusForbidden)
			return
		}
		reps = ws
	}
	r.redirect(w, req, p, reps)
}

// writableOnly keeps the replicas on writable exports, in their order.
func writableOnly(reps []fed.Replica) []fed.Replica {
	var ws []fed.Replica
	for _, x := range reps {
		if x.Writable {
			ws = append(ws, x)
		}
	}
	return ws
}

func (r *Redirector) unavailable(w http.ResponseWriter, p string, errs []string) {
	r.met.redirects.WithLabelValues("503").Inc()
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((r.opts.LookupTimeout+time.Second-1)/time.Second))))
	msg := p + ": no member that may hold it answered in time"
	if len(errs) > 0 {
		msg += " (" + strings.Join(errs[:min(len(errs), 4)], "; ") + ")"
	}
	http.Error(w, msg, http.StatusServiceUnavailable)
}

// redirectWrite sends a new file (PUT, MKCOL, OPTIONS) to a writable member.
func (r *Redirector) redirectWrite(w http.ResponseWriter, req *http.Request, p string, tried map[string]bool) {
	targets, covered := r.writeTargets(p, tried)
	if hs := slices.DeleteFunc(slices.Clone(targets), func(c candidate) bool { return fed.IsRootURL(c.URL) }); len(hs) < len(targets) {
		if len(hs) == 0 {
			r.met.redirects.WithLabelValues("404").Inc()
			http.Error(w, p+": only XRootD servers that speak no HTTP may take it ("+targets[0].URL+"): write it over root://", http.StatusNotFound)
			return
		}
		targets = hs
	}
	if len(targets) == 0 {
		if !covered {
			r.met.redirects.WithLabelValues("404").Inc()
			http.Error(w, p+": no member exports this path", http.StatusNotFound)
			return
		}
		var any bool
		cands, _, _ := r.reg.candidates(p, nil, true)
		for _, c := range cands {
			any = any || c.writable
		}
		if !any {
			r.met.redirects.WithLabelValues("403").Inc()
			http.Error(w, p+": every member exports this path read-only", http.StatusForbidden)
			return
		}
		r.unavailable(w, p, []string{"every writable member is drained or was reported failing"})
		return
	}
	// A new version is coming: whatever was cached about p is stale.
	r.cache.forget(p)
	reps := make([]fed.Replica, len(targets))
	for i, t := range targets {
		reps[i] = fed.Replica{URL: fed.FileURL(t.URL, p), Member: t.ID}
	}
	r.redirect(w, req, p, reps[:min(len(reps), 4)])
}

// redirect answers 307 to reps[0], with every replica as an RFC 6249 Link
// and, when asked for, a Metalink 4 body.
func (r *Redirector) redirect(w http.ResponseWriter, req *http.Request, p string, reps []fed.Replica) {
	// The query goes along byte for byte (tokens such as
	// authz=Bearer%20... must not be re-encoded), less our tried=.
	// A token in the query (authz) travels only to members reached over
	// TLS: a plain-http target gets the query without it, and the client
	// presents its token again (as it does with an Authorization header,
	// which no redirect carries).
	var keep, keepPlain []string
	for _, kv := range strings.Split(req.URL.RawQuery, "&") {
		if k, _, _ := strings.Cut(kv, "="); kv != "" && k != fed.ParamTried {
			keep = append(keep, kv)
			if k != "authz" {
				keepPlain = append(keepPlain, kv)
			}
		}
	}
	rawQuery, plainQuery := strings.Join(keep, "&"), strings.Join(keepPlain, "&")
	target := func(u string) string {
		q := rawQuery
		if !strings.HasPrefix(u, "https://") {
			q = plainQuery
		}
		if q == "" {
			return u
		}
		return u + "?" + q
	}
	for i, x := range reps {
		w.Header().Add("Link", fmt.Sprintf("<%s>; rel=duplicate; pri=%d", target(x.URL), i+1))
	}
	w.Header().Set("Location", target(reps[0].URL))
	w.Header().Set("Cache-Control", "no-store")
	r.met.redirects.WithLabelValues("307").Inc()
	if wantsMetalink(req) {
		w.Header().Set("Content-Type", "application/metalink4+xml")
		w.WriteHeader(http.StatusTemporaryRedirect)
		if req.Method != http.MethodHead {
			_ = writeMetalink(w, p, reps, target)
		}
		return
	}
	w.WriteHeader(http.StatusTemporaryRedirect)
}

func wantsMetalink(req *http.Request) bool {
	for _, part := range strings.Split(req.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "application/metalink4+xml" {
			return true
		}
	}
	return false
}

type mlURL struct {
	Priority int    `xml:"priority,attr"`
	URL      string `xml:",chardata"`
}

type mlFile struct {
	Name string  `xml:"name,attr"`
	Size *int64  `xml:"size,omitempty"`
	URLs []mlURL `xml:"url"`
}

type metalink struct {
	XMLName   xml.Name `xml:"urn:ietf:params:xml:ns:metalink metalink"`
	Generator string   `xml:"generator"`
	Published string   `xml:"published"`
	Files     []mlFile `xml:"file"`
}

// writeMetalink writes an RFC 5854 document listing the replicas.
func writeMetalink(w io.Writer, p string, reps []fed.Replica, target func(string) string) error {
	f := mlFile{Name: path.Base(p)}                  // p is decoded already
	if !reps[0].IsDir && !reps[0].ModTime.IsZero() { // a located file, not a write target
		s := reps[0].Size
		f.Size = &s
	}
	for i, x := range reps {
		f.URLs = append(f.URLs, mlURL{Priority: i + 1, URL: target(x.URL)})
	}
	m := metalink{Generator: "wanda", Published: time.Now().UTC().Format(time.RFC3339), Files: []mlFile{f}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(m)
}

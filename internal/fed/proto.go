// Package fed is the federation protocol: the messages members (servers,
// caches, child redirectors) and redirectors exchange, as versioned JSON
// over HTTP(S), and the member side of it (heartbeats, the locate answer
// of a data server). docs/federation.md is the user's description.
//
// Endpoints (all under /api/v1/, JSON bodies, "version": "wanda.fed/v1"):
//
//	POST   /api/v1/members          a member's heartbeat (Member) -> HeartbeatReply
//	DELETE /api/v1/members?id=ID    a member leaves (graceful shutdown)
//	GET    /api/v1/members          the members a redirector knows ([]MemberStatus)
//	GET    /api/v1/locate?path=P    where P is (Located); servers and redirectors
//	GET    /api/v1/topology         the tree below a redirector (Node)
//	POST   /api/v1/admin/{drain,undrain,remove,add}   admin actions (AdminRequest)
//
// Why by hand: no library speaks this; the messages are a handful of
// structs and encoding/json with size limits and strict decoding is all
// they need.
package fed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Version names this protocol. A message with another version is refused
// with an error that names both.
const Version = "wanda.fed/v1"

// MaxBody bounds every protocol message a peer sends us.
const MaxBody = 1 << 20

// Roles of members.
const (
	RoleServer     = "server"
	RoleRedirector = "redirector"
	RoleCache      = "cache"
)

// Member is what a member tells a redirector in each heartbeat. The first
// heartbeat joins; every later one refreshes; they are idempotent, so a
// restarted redirector learns a member again from its next heartbeat.
type Member struct {
	Version string `json:"version"`
	// ID names the member across restarts: its advertised URL unless
	// configured otherwise.
	ID string `json:"id"`
	// Instance changes at every start of the member's process, so a
	// redirector sees a restart (and forgets what it cached about it).
	Instance string `json:"instance"`
	Role     string `json:"role"`
	// URL is where clients are sent: scheme://host:port, no path.
	URL string `json:"url"`
	// XRootD, when set, is the host:port root:// clients are sent to, for
	// a member whose root:// port is not its URL's (an XRootD server with
	// XrdHttp on another port). wanda members answer root:// on their URL.
	XRootD string `json:"xrootd,omitempty"`
	// Exports are the logical prefixes the member serves; for a
	// redirector, the union of its members' (writable if any is).
	Exports []Export `json:"exports"`
	// Labels are free key=value pairs (site, region, ...) used by
	// selection policies; Priority orders replicas (lower first).
	Labels   map[string]string `json:"labels,omitempty"`
	Priority int               `json:"priority,omitempty"`
	Load     Load              `json:"load"`
	Software string            `json:"software,omitempty"`
	// Drained is the member's own record of an admin drain, sent back so
	// that a restarted redirector keeps it.
	Drained bool `json:"drained,omitempty"`
	// Generation, from a redirector, changes whenever its own members
	// change: its parent then forgets the "not found" answers it cached.
	Generation uint64 `json:"generation,omitempty"`
}

// Export is one logical prefix of a member.
type Export struct {
	Prefix   string `json:"prefix"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Load is a member's current load and space.
type Load struct {
	// Active is the number of requests in progress; Connections the open
	// client connections.
	Active      int64 `json:"active"`
	Connections int64 `json:"connections"`
	// FreeBytes and TotalBytes are summed over writable exports.
	FreeBytes  int64 `json:"free_bytes"`
	TotalBytes int64 `json:"total_bytes"`
	// Members counts live members below a redirector.
	Members int `json:"members,omitempty"`
}

// HeartbeatReply is a redirector's answer to a heartbeat.
type HeartbeatReply struct {
	Version string `json:"version"`
	// Redirector is the answering redirector's ID.
	Redirector string `json:"redirector"`
	// IntervalMS is the heartbeat interval the redirector expects; a
	// member adopts it. A member missing MissLimit heartbeats is dropped.
	IntervalMS int64 `json:"interval_ms"`
	MissLimit  int   `json:"miss_limit"`
	// Drained tells the member an admin drained (or undrained) it.
	Drained bool `json:"drained"`
	// Removed tells the member an admin removed it: it stops sending
	// heartbeats to this redirector until it restarts.
	Removed bool `json:"removed,omitempty"`
	// Digest says the redirector holds a digest of the member's names
	// (DigestPath): a member that keeps one sends it when this is false.
	Digest bool `json:"digest,omitempty"`
}

// Interval is IntervalMS as a duration.
func (r HeartbeatReply) Interval() time.Duration {
	return time.Duration(r.IntervalMS) * time.Millisecond
}

// Locate outcomes.
const (
	Found       = "found"
	NotFound    = "not_found"
	Unavailable = "unavailable" // nobody who might have it answered in time
)

// Located answers GET /api/v1/locate.
type Located struct {
	Version  string    `json:"version"`
	Path     string    `json:"path"`
	Status   string    `json:"status"`
	Replicas []Replica `json:"replicas,omitempty"`
	// Errors names the members that did not answer, for the user.
	Errors []string `json:"errors,omitempty"`
}

// Replica is one copy of a logical file on one data member.
type Replica struct {
	// URL is the full data URL of the file (member URL + logical path).
	URL string `json:"url"`
	// XRootD is the member's root:// host:port when not URL's (see
	// Member.XRootD).
	XRootD string `json:"xrootd,omitempty"`
	// Member is the ID of the member that holds it; Role its role (a
	// cache's copy is not sent to a cache, which would loop).
	Member string `json:"member"`
	Role   string `json:"role,omitempty"`
	// Via lists the redirectors the answer came through, nearest last.
	Via []string `json:"via,omitempty"`
	// LocalPath is where the member keeps it (its namespace mapping).
	LocalPath string            `json:"local_path,omitempty"`
	Size      int64             `json:"size"`
	ModTime   time.Time         `json:"mtime"`
	IsDir     bool              `json:"is_dir,omitempty"`
	Writable  bool              `json:"writable,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Priority  int               `json:"priority,omitempty"`
	Load      Load              `json:"load"`
}

// Locate query parameters.
const (
	// ParamPath is the logical path.
	ParamPath = "path"
	// ParamHops is how many more redirector levels the query may cross.
	ParamHops = "hops"
	// ParamVisited lists the redirector IDs the query went through.
	ParamVisited = "visited"
	// ParamScope is "down" (a parent asking: never escalate upward),
	// "up" (a child escalating) or empty (a user: may escalate).
	ParamScope = "scope"
	// ParamAll asks for every replica (wait for every answer).
	ParamAll = "all"
	// ParamTried lists hosts (host:port) the client failed with.
	ParamTried = "tried"
	// ParamHTTP ("1") asks for replicas an HTTP client can read: not
	// those of XRootD servers that speak only root://.
	ParamHTTP = "http"
)

// Scopes of a locate query.
const (
	ScopeDown = "down"
	ScopeUp   = "up"
)

// CacheAgent is in the User-Agent of a wanda cache's upstream requests: a
// redirector never sends them to a cache's copy (the cache would be asked
// for what it is fetching).
const CacheAgent = "wanda-cache"

// DefaultHops bounds a query's path through the hierarchy.
const DefaultHops = 8

// MemberStatus is a redirector's view of one member.
type MemberStatus struct {
	Member
	LastSeen  time.Time `json:"last_seen"`
	Healthy   bool      `json:"healthy"`
	Static    bool      `json:"static,omitempty"`
	Removed   bool      `json:"removed,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	// DigestNames is how many names the member's digest holds (0: it
	// sent none; docs/federation.md, "Digests").
	DigestNames int `json:"digest_names,omitempty"`
}

// Node is one redirector or member in GET /api/v1/topology.
type Node struct {
	Version  string            `json:"version,omitempty"`
	ID       string            `json:"id"`
	Role     string            `json:"role"`
	URL      string            `json:"url"`
	Healthy  bool              `json:"healthy"`
	Drained  bool              `json:"drained,omitempty"`
	Static   bool              `json:"static,omitempty"`
	AgeMS    int64             `json:"last_seen_ms_ago"`
	Exports  []Export          `json:"exports,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Load     Load              `json:"load"`
	Error    string            `json:"error,omitempty"`
	Children []Node            `json:"children,omitempty"`
}

// AdminRequest is the body of POST /api/v1/admin/{drain,undrain,remove,add}.
// Member is a member's ID or URL; Add also takes the static member's
// description (a server that sends no heartbeats, probed with HEAD).
type AdminRequest struct {
	Version string  `json:"version"`
	Member  string  `json:"member"`
	Add     *Member `json:"add,omitempty"`
}

// Error is the JSON body of every protocol error answer.
type Error struct {
	Version string `json:"version"`
	Error   string `json:"error"`
}

// Decode reads one JSON message of at most MaxBody bytes into v, refusing
// trailing data and another protocol version (the version field is
// checked when v has one). Requests to a redirector (Member,
// AdminRequest) must not carry unknown fields, so a typo is an error;
// answers may (a newer peer may add fields within a version).
func Decode(r io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, MaxBody+1))
	if err != nil {
		return fmt.Errorf("reading message: %w", err)
	}
	if len(b) > MaxBody {
		return fmt.Errorf("message larger than %d bytes", MaxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	switch v.(type) {
	case *Member, *AdminRequest, *Events:
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad message: %w", err)
	}
	if dec.More() {
		return errors.New("bad message: trailing data after the JSON value")
	}
	if ver := versionOf(v); ver != Version {
		return fmt.Errorf("protocol version %q, this wanda speaks %q", ver, Version)
	}
	return nil
}

func versionOf(v any) string {
	switch m := v.(type) {
	case *Member:
		return m.Version
	case *HeartbeatReply:
		return m.Version
	case *Located:
		return m.Version
	case *AdminRequest:
		return m.Version
	case *Node:
		return m.Version
	case *Events:
		return m.Version
	}
	return Version
}

// Validate checks a member's heartbeat: an ID, a known role, an absolute
// http(s) URL without path, query or user info, and clean prefixes.
func (m *Member) Validate() error { return m.validate(false) }

// ValidateStatic checks a static member, which may also be an XRootD
// server reached over root:// only (a root:// or roots:// URL, probed with
// kXR_stat).
func (m *Member) ValidateStatic() error { return m.validate(true) }

func (m *Member) validate(static bool) error {
	var errs []error
	if m.ID == "" || len(m.ID) > 512 || strings.ContainsAny(m.ID, ", \t\r\n") {
		// Commas separate IDs in a query's visited list.
		errs = append(errs, errors.New("id: empty, longer than 512 bytes, or with a comma or white space"))
	}
	switch m.Role {
	case RoleServer, RoleRedirector, RoleCache:
	default:
		errs = append(errs, fmt.Errorf("role %q: want server, redirector or cache", m.Role))
	}
	switch {
	case static && IsRootURL(m.URL):
		if err := CheckStaticURL(m.URL); err != nil {
			errs = append(errs, err)
		}
		if m.XRootD != "" {
			errs = append(errs, errors.New("xrootd: only with an http(s) url (a root:// url is the root:// address)"))
		}
	default:
		if err := CheckBaseURL(m.URL); err != nil {
			errs = append(errs, err)
		}
	}
	if m.XRootD != "" {
		if err := CheckHostPort(m.XRootD); err != nil {
			errs = append(errs, fmt.Errorf("xrootd: %w", err))
		}
	}
	// A redirector whose members all left exports nothing for a while.
	if (len(m.Exports) == 0 && m.Role != RoleRedirector) || len(m.Exports) > 1024 {
		errs = append(errs, fmt.Errorf("exports: %d given, want 1 to 1024", len(m.Exports)))
	}
	for i, e := range m.Exports {
		if _, err := CleanPrefix(e.Prefix); err != nil {
			errs = append(errs, fmt.Errorf("exports[%d]: %w", i, err))
		}
	}
	if len(m.Labels) > 64 {
		errs = append(errs, errors.New("labels: more than 64"))
	}
	return errors.Join(errs...)
}

// CheckBaseURL accepts http(s)://host[:port] with nothing after it.
func CheckBaseURL(s string) error { return checkURL(s, "http", "https") }

// CheckStaticURL accepts a static member's URL: http(s)://host[:port], or
// root(s)://host[:port] for an XRootD server reached over root:// only.
func CheckStaticURL(s string) error { return checkURL(s, "http", "https", "root", "roots") }

// IsRootURL reports a root:// or roots:// URL (an XRootD server).
func IsRootURL(s string) bool {
	return strings.HasPrefix(s, "root://") || strings.HasPrefix(s, "roots://")
}

// checkURL accepts scheme://host[:port] with nothing after it, for the
// schemes given.
func checkURL(s string, schemes ...string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("url %q: %w", s, err)
	}
	bad := !slices.Contains(schemes, u.Scheme) || u.Hostname() == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || strings.ContainsAny(s, "?#") || len(s) > 512
	if p := u.Port(); !bad && (p != "" || strings.HasSuffix(u.Host, ":")) {
		n, err := strconv.Atoi(p)
		bad = err != nil || n < 1 || n > 65535
	}
	if bad {
		return fmt.Errorf("url %q: want %s://host:port with no path, query or user", s, strings.Join(schemes, "|"))
	}
	return nil
}

// CleanPrefix returns a prefix in canonical form ("/store/mc", or "/" for
// everything), refusing "..", "." and empty segments inside, and control
// characters.
func CleanPrefix(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || len(p) > 4096 {
		return "", fmt.Errorf("prefix %q: must start with / and be at most 4096 bytes", p)
	}
	t := strings.Trim(p, "/")
	if t == "" {
		return "/", nil
	}
	for _, seg := range strings.Split(t, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return "", fmt.Errorf("prefix %q: bad segment %q", p, seg)
		}
	}
	return "/" + t, nil
}

// Covers reports whether the logical path p (clean, leading slash) is at or
// below prefix (as from CleanPrefix).
func Covers(prefix, p string) bool {
	return prefix == "/" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

// BaseURL returns u (a member URL) in canonical form, without a trailing slash.
func BaseURL(u string) string { return strings.TrimRight(u, "/") }

// FileURL joins a member's base URL and a clean logical path, escaping it.
func FileURL(base, logical string) string {
	if IsRootURL(base) {
		// root://host:port//store/f, the form XRootD's clients use.
		return BaseURL(base) + "/" + (&url.URL{Path: logical}).EscapedPath()
	}
	return BaseURL(base) + (&url.URL{Path: logical}).EscapedPath()
}

// CheckHostPort accepts host:port (a root:// address), port 1 to 65535.
func CheckHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || len(s) > 300 || strings.ContainsAny(s, "/?#@ \t\r\n,") {
		return fmt.Errorf("%q: want host:port", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: bad port", s)
	}
	return nil
}

// RootHost is where root:// clients are sent for replica r: its XRootD
// address, else its URL's host:port.
func (r Replica) RootHost() string {
	if r.XRootD != "" {
		return strings.ToLower(r.XRootD)
	}
	return HostOf(r.URL)
}

// TriedIn reports whether a client said it failed with r's server, by
// either of its addresses (tried= lists host:port).
func (r Replica) TriedIn(tried map[string]bool) bool { return triedIn(tried, r.URL, r.XRootD) }

// TriedIn reports whether a client said it failed with m, by either of
// its addresses.
func (m Member) TriedIn(tried map[string]bool) bool { return triedIn(tried, m.URL, m.XRootD) }

func triedIn(tried map[string]bool, u, xrootd string) bool {
	return len(tried) > 0 && (tried[HostOf(u)] || (xrootd != "" && tried[strings.ToLower(xrootd)]))
}

// HostOf returns the host:port of a URL in lower case, "" if it has none.
func HostOf(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

// ShortErr drops the "Get \"URL\": " net/http puts in front of a
// request's error (the caller names the peer; the URL may carry a
// query): what is left is the cause.
func ShortErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

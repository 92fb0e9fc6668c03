package xrdstream

import (
	"crypto/sha256"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/monitor/xrdmon"
)

// identity is who sends: the server id (48 bits of a hash of site, host,
// port, instance and program, stable across restarts, as XRootD's
// fingerprint is), its decimal form in every user ident, the start time.
type identity struct {
	sid    int64
	key    string
	stod   int32
	server string // the '=' record's text
}

func newIdentity(o Options) identity {
	h := sha256.Sum256([]byte(o.Site + "\x00" + o.Host + "\x00" + strconv.Itoa(o.Port) + "\x00" + o.Instance + "\x00" + o.Program))
	var b [8]byte
	copy(b[2:], h[:6])
	id := identity{sid: int64(binary.BigEndian.Uint64(b[:])), stod: int32(o.Start.Unix())}
	id.key = strconv.FormatInt(id.sid, 10)
	id.server = "=/" + ownUser() + "." + strconv.Itoa(os.Getpid()) + ":" + id.key + "@" + o.Host +
		"\n&site=" + o.Site + "&port=" + strconv.Itoa(o.Port) + "&inst=" + o.Instance + "&pgm=" + o.Program + "&ver=" + o.Version
	return id
}

// ident is a user's "prot/name.pid:sid@host".
func (id identity) ident(proto, name, pid, host string) string {
	return proto + "/" + sanitize(name) + "." + pid + ":" + id.key + "@" + host
}

// sanitize keeps an ident's user name parseable: what collectors split
// on (/ : @ and blanks) becomes '_' (XRootD sanitizes login names the
// same way), at most 63 bytes.
func sanitize(s string) string {
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '/' || r == ':' || r == '@' || r == '&' || r > '~' {
			return '_'
		}
		return r
	}, s)
}

// cgiSafe keeps an info value inside its "&k=v" pair.
func cgiSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '&' || r == '\n' || r == 0 {
			return '_'
		}
		return r
	}, s)
}

func netipAddr(hostport string) (netip.Addr, error) {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return netip.ParseAddr(strings.Trim(hostport, "[]"))
	}
	return ap.Addr(), nil
}

// hostCache names clients: by reverse lookup when resolving (a cache of
// the answers, failures included, for an hour), else by address (IPv6
// in brackets, as XRootD writes an unresolved one).
type hostCache struct {
	resolve bool
	m       map[netip.Addr]hostEntry
}

type hostEntry struct {
	name string
	at   time.Time
}

const (
	hostTTL   = time.Hour
	hostLimit = 4096
)

func newHostCache(resolve bool) *hostCache {
	return &hostCache{resolve: resolve, m: map[netip.Addr]hostEntry{}}
}

func (h *hostCache) name(client string) string {
	a, err := netipAddr(client)
	if err != nil {
		if host, _, err := net.SplitHostPort(client); err == nil {
			return host
		}
		return client
	}
	a = a.Unmap()
	lit := a.String()
	if a.Is6() {
		lit = "[" + lit + "]"
	}
	if !h.resolve {
		return lit
	}
	now := time.Now()
	if e, ok := h.m[a]; ok && now.Sub(e.at) < hostTTL {
		return e.name
	}
	n := lookupAddr(a.String())
	if n == "" {
		n = lit
	}
	if len(h.m) >= hostLimit {
		clear(h.m)
	}
	h.m[a] = hostEntry{n, now}
	return n
}

// sendIdent sends the server identification ('=').
func (s *Stream) sendIdent() {
	text := s.id.server
	ident, info, _ := strings.Cut(text, "\n")
	s.sendMap(xrdmon.CodeIdent, xrdmon.Map{Ident: ident, Info: info, HasInfo: true})
}

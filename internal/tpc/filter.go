package tpc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrNotAllowed: the remote's address is refused by the filter.
var ErrNotAllowed = errors.New("remote address not allowed")

// Filter decides which addresses a third-party copy may connect to. As in
// XRootD, private, loopback, link-local, multicast and unspecified
// addresses are refused unless an allow prefix opens them (so that a
// COPY cannot make a server reach into its own site's network); deny
// prefixes refuse public ranges too. Deny wins over allow.
//
// The check is made on every connection, on the address actually dialed
// (net.Dialer.Control), so a name that resolves to a refused address is
// refused whatever it resolved to when the request was checked.
type Filter struct {
	allow, deny []netip.Prefix
}

// NewFilter parses CIDR prefixes ("127.0.0.0/8", "::1/128"; a bare
// address is its own /32 or /128).
func NewFilter(allow, deny []string) (*Filter, error) {
	f := &Filter{}
	var err error
	if f.allow, err = parsePrefixes(allow); err != nil {
		return nil, fmt.Errorf("tpc allow: %w", err)
	}
	if f.deny, err = parsePrefixes(deny); err != nil {
		return nil, fmt.Errorf("tpc deny: %w", err)
	}
	return f, nil
}

func parsePrefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix or an address", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Allowed reports whether a may be connected to, and why not.
func (f *Filter) Allowed(a netip.Addr) error {
	a = a.Unmap()
	for _, p := range f.deny {
		if p.Contains(a) {
			return fmt.Errorf("%w: %s is in the denied range %s", ErrNotAllowed, a, p)
		}
	}
	for _, p := range f.allow {
		if p.Contains(a) {
			return nil
		}
	}
	if restricted(a) {
		return fmt.Errorf("%w: %s is a private, loopback or local address (open a range with --tpc-allow CIDR)", ErrNotAllowed, a)
	}
	return nil
}

func restricted(a netip.Addr) bool {
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() ||
		cgnat.Contains(a)
}

// cgnat is RFC 6598's shared address space, private in all but name.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Control is a net.Dialer.Control that refuses what Allowed refuses.
func (f *Filter) Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an address", ErrNotAllowed, host)
	}
	return f.Allowed(a)
}

// CheckHost refuses a literal address early (before any request), so the
// answer names it; names are checked when dialed.
func (f *Filter) CheckHost(host string) error {
	h := host
	if sh, _, err := net.SplitHostPort(host); err == nil {
		h = sh
	}
	h = strings.Trim(h, "[]")
	if a, err := netip.ParseAddr(h); err == nil {
		return f.Allowed(a)
	}
	if strings.EqualFold(h, "localhost") || strings.HasSuffix(strings.ToLower(h), ".localhost") {
		return f.Allowed(netip.MustParseAddr("127.0.0.1"))
	}
	return nil
}

package x509auth

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// vomsStore is one load of a vomsdir:
//
//	<vo>/<host>.lsc  the VOMS server's DN, then its issuers' DNs, one a
//	                 line (chains separated by a "------ NEXT CHAIN ------"
//	                 line): the chain itself comes in the AC
//	<vo>/*.pem       the VOMS servers' certificates (the older way)
//	*.pem            the same, for any VO
type vomsStore struct {
	lsc   map[string][][]string          // "vo/host" -> DN chains
	certs map[string][]*x509.Certificate // vo ("" for any) -> certificates
	stamp string
}

func vomsFile(name string) bool {
	return strings.HasSuffix(name, ".lsc") || strings.HasSuffix(name, ".pem")
}

// vomsStamp is dirStamp over the vomsdir and its VO directories.
func vomsStamp(dir string) (string, []string, error) {
	top, err := dirStamp(dir, vomsFile)
	if err != nil {
		return "", nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	var vos []string
	var b strings.Builder
	b.WriteString(top)
	for _, e := range ents {
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); err != nil || !fi.IsDir() {
			continue
		}
		s, err := dirStamp(filepath.Join(dir, e.Name()), vomsFile)
		if err != nil {
			return "", nil, err
		}
		vos = append(vos, e.Name())
		fmt.Fprintf(&b, "[%s]\n%s", e.Name(), s)
	}
	sort.Strings(vos)
	return b.String(), vos, nil
}

// loadVOMSDir reads dir unless old already holds this version of it.
func loadVOMSDir(dir string, old *vomsStore) (*vomsStore, error) {
	stamp, vos, err := vomsStamp(dir)
	if err != nil {
		return nil, fmt.Errorf("vomsdir: %w", err)
	}
	if old != nil && old.stamp == stamp {
		return old, nil
	}
	vs := &vomsStore{lsc: map[string][][]string{}, certs: map[string][]*x509.Certificate{}, stamp: stamp}
	for _, vo := range append([]string{""}, vos...) {
		d := filepath.Join(dir, vo)
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("vomsdir: %w", err)
		}
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			if !vomsFile(e.Name()) {
				continue
			}
			b, err := readRegular(p)
			if err != nil {
				return nil, fmt.Errorf("vomsdir: %w", err)
			}
			if b == nil {
				continue
			}
			switch {
			case strings.HasSuffix(e.Name(), ".lsc") && vo != "":
				chains, err := parseLSC(b)
				if err != nil {
					return nil, fmt.Errorf("vomsdir: %s: %w", p, err)
				}
				vs.lsc[vo+"/"+strings.TrimSuffix(e.Name(), ".lsc")] = chains
			case strings.HasSuffix(e.Name(), ".pem"):
				certs, err := parsePEMCerts(b)
				if err != nil {
					return nil, fmt.Errorf("vomsdir: %s: %w", p, err)
				}
				vs.certs[vo] = append(vs.certs[vo], certs...)
			}
		}
	}
	return vs, nil
}

// parseLSC reads an .lsc file: DNs in OpenSSL's one-line form, the VOMS
// server's first, then each issuer's; "------ NEXT CHAIN ------" starts
// another accepted chain. Errors name the line.
func parseLSC(b []byte) ([][]string, error) {
	var chains [][]string
	var cur []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#':
		case strings.HasPrefix(line, "---") && strings.Contains(line, "NEXT CHAIN"):
			if len(cur) > 0 {
				chains, cur = append(chains, cur), nil
			}
		case line[0] == '/':
			cur = append(cur, line)
		default:
			return nil, fmt.Errorf("line %d: %q is not a DN in OpenSSL's one-line form", n, line)
		}
	}
	if len(cur) > 0 {
		chains = append(chains, cur)
	}
	for i, c := range chains {
		if len(c) < 2 {
			return nil, fmt.Errorf("chain %d: want the VOMS server's DN and its CA's, got %d line(s)", i+1, len(c))
		}
	}
	if len(chains) == 0 {
		return nil, errors.New("no DN")
	}
	return chains, sc.Err()
}

// attributes returns the FQANs of the VOMS ACs found in proxies (leaf
// first) that verify, and the earliest end of their validity. below is
// the rest of the verified chain (the end-entity and what follows).
// Attributes that do not verify are left out and reported in the error;
// nothing unverified is ever returned.
func (vs *vomsStore) attributes(proxies, below []*x509.Certificate, ca *caStore, targets []string, now time.Time) ([]string, time.Time, error) {
	for i, p := range proxies {
		ders, err := vomsACs(p)
		if err != nil {
			return nil, time.Time{}, err
		}
		if ders == nil {
			continue
		}
		// The holder must be a certificate this proxy descends from.
		holders := append(slices.Clip(proxies[i+1:]), below[:1]...)
		var fqans []string
		var until time.Time
		var errs []error
		for _, der := range ders {
			ac, err := parseAC(der)
			if err == nil {
				err = vs.verifyAC(ac, holders, ca, targets, now)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fqans = append(fqans, ac.fqans...)
			if until.IsZero() || ac.info.Validity.NotAfter.Before(until) {
				until = ac.info.Validity.NotAfter
			}
		}
		return fqans, until, errors.Join(errs...)
	}
	return nil, time.Time{}, nil
}

// verifyAC checks one AC: issued to a certificate of the chain, within
// its validity, signed by a VOMS server that the vomsdir names for its VO
// and host and that chains to a trusted CA, for this server if targeted,
// and granting only groups of its own VO.
func (vs *vomsStore) verifyAC(ac *voAC, holders []*x509.Certificate, ca *caStore, targets []string, now time.Time) error {
	what := fmt.Sprintf("VOMS attributes of VO %s from %s", ac.vo, ac.host)
	if !ac.holderIn(holders) {
		return fmt.Errorf("%s: issued to another certificate", what)
	}
	if now.Before(ac.info.Validity.NotBefore) || now.After(ac.info.Validity.NotAfter) {
		return fmt.Errorf("%s: expired or not yet valid (%s to %s)", what,
			ac.info.Validity.NotBefore.UTC().Format(time.RFC3339), ac.info.Validity.NotAfter.UTC().Format(time.RFC3339))
	}
	if ac.targeted && !slices.ContainsFunc(ac.targets, func(t string) bool { return slices.Contains(targets, t) }) {
		return fmt.Errorf("%s: restricted to the targets %q", what, ac.targets)
	}
	for _, f := range ac.fqans {
		if f != "/"+ac.vo && !strings.HasPrefix(f, "/"+ac.vo+"/") {
			return fmt.Errorf("%s: FQAN %q outside the VO", what, f)
		}
	}
	signer, err := vs.signer(ac, ca, now)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := ac.checkSignature(signer); err != nil {
		return fmt.Errorf("%s: signature: %w", what, err)
	}
	return nil
}

// signer finds the VOMS server certificate that the vomsdir trusts for
// the AC: from the AC's own chain, matched against the .lsc of its VO
// and host, else a certificate of the vomsdir. Either way it must chain
// to a CA of the CA directory and not be revoked.
func (vs *vomsStore) signer(ac *voAC, ca *caStore, now time.Time) (*x509.Certificate, error) {
	verify := func(c *x509.Certificate, inter []*x509.Certificate) ([]*x509.Certificate, error) {
		pool := x509.NewCertPool()
		for _, i := range inter {
			pool.AddCert(i)
		}
		paths, err := c.Verify(x509.VerifyOptions{Roots: ca.pool, Intermediates: pool, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return nil, describe(c, err, now)
		}
		for _, p := range paths {
			if err = ca.checkRevoked(p, now); err == nil {
				return p, nil
			}
		}
		return nil, err
	}
	if chains, ok := vs.lsc[ac.vo+"/"+ac.host]; ok {
		for _, c := range ac.certs {
			if !bytes.Equal(c.RawSubject, ac.issuer) {
				continue
			}
			path, err := verify(c, ac.certs)
			if err != nil {
				return nil, fmt.Errorf("VOMS server certificate: %w", err)
			}
			for _, lsc := range chains {
				if lscMatches(lsc, path) {
					return c, nil
				}
			}
			return nil, fmt.Errorf("VOMS server %s (issued by %s) does not match %s/%s.lsc", mustDN(c.RawSubject), mustDN(c.RawIssuer), ac.vo, ac.host)
		}
		return nil, fmt.Errorf("the AC does not carry the certificate of its issuer %s", mustDN(ac.issuer))
	}
	for _, c := range append(slices.Clip(vs.certs[ac.vo]), vs.certs[""]...) {
		if !bytes.Equal(c.RawSubject, ac.issuer) || ac.checkSignature(c) != nil {
			continue
		}
		if _, err := verify(c, ac.certs); err != nil {
			return nil, fmt.Errorf("VOMS server certificate: %w", err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("vomsdir has no %s/%s.lsc nor a certificate of %s", ac.vo, ac.host, mustDN(ac.issuer))
}

// lscMatches compares an .lsc chain with a verified path (server first):
// line 0 is the server's subject, line i the issuer of path[i-1]. A path
// that ends at a trusted intermediate may be shorter than the file.
func lscMatches(lsc []string, path []*x509.Certificate) bool {
	if len(lsc) < 2 || len(path) == 0 || normalizeDN(lsc[0]) != mustDN(path[0].RawSubject) {
		return false
	}
	for i := 1; i < len(lsc) && i <= len(path); i++ {
		if normalizeDN(lsc[i]) != mustDN(path[i-1].RawIssuer) {
			return false
		}
	}
	return true
}

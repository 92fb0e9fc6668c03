package x509auth

import (
	"bufio"
	"bytes"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
)

// attribute names as OpenSSL prints them in its one-line form.
var attrNames = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.9":                    "street",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"2.5.4.5":                    "serialNumber",
	"2.5.4.4":                    "SN",
	"2.5.4.42":                   "GN",
	"2.5.4.12":                   "title",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.1":  "UID",
	"1.2.840.113549.1.9.1":       "emailAddress",
}

// FormatDN writes a name in OpenSSL's "/DC=org/DC=example/CN=Alice"
// form, in the certificate's order (as grid-mapfiles and XRootD write
// DNs); a multi-valued RDN is joined with "+".
func FormatDN(seq pkix.RDNSequence) string {
	var b strings.Builder
	for _, rdn := range seq {
		b.WriteByte('/')
		for i, atv := range rdn {
			if i > 0 {
				b.WriteByte('+')
			}
			t, ok := attrNames[atv.Type.String()]
			if !ok {
				t = atv.Type.String()
			}
			fmt.Fprintf(&b, "%s=%v", t, atv.Value)
		}
	}
	return b.String()
}

// DN formats a DER name (a certificate's RawSubject or RawIssuer) as
// FormatDN does; pkix.Name would reorder it and drop DC components.
func DN(der []byte) string {
	var seq pkix.RDNSequence
	if _, err := asn1.Unmarshal(der, &seq); err != nil {
		return "(unparsable name)"
	}
	return FormatDN(seq)
}

func pemBlocks(b []byte) []*pem.Block {
	var out []*pem.Block
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		out = append(out, blk)
	}
}

// ParseGridMap reads a grid-mapfile: per line a DN (quoted when it has
// spaces) and a name or comma-separated names (the first is used); '#'
// starts a comment. Errors name the line.
func ParseGridMap(b []byte) (map[string]string, error) {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var dn, rest string
		if line[0] == '"' {
			end := strings.IndexByte(line[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated quote", n)
			}
			dn, rest = line[1:1+end], line[2+end:]
		} else {
			var ok bool
			dn, rest, ok = strings.Cut(line, " ")
			if !ok {
				dn, rest, _ = strings.Cut(line, "\t")
			}
		}
		names := strings.TrimSpace(rest)
		first, _, _ := strings.Cut(names, ",")
		first = strings.TrimSpace(first)
		if !strings.HasPrefix(dn, "/") || first == "" || strings.ContainsAny(first, " \t\"") {
			return nil, fmt.Errorf("line %d: want \"/DN\" name", n)
		}
		m[dn] = first
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// loadGridMap reads the grid-mapfile when it changed.
func (v *Verifier) loadGridMap() error {
	if v.cfg.GridMap == "" {
		return nil
	}
	fi, err := os.Stat(v.cfg.GridMap)
	if err != nil {
		return fmt.Errorf("grid-mapfile: %w", err)
	}
	v.mu.Lock()
	same := v.gridmap != nil && fi.ModTime().Equal(v.gmMtime) && fi.Size() == v.gridSize
	v.mu.Unlock()
	if same {
		return nil
	}
	b, err := os.ReadFile(v.cfg.GridMap)
	if err != nil {
		return fmt.Errorf("grid-mapfile: %w", err)
	}
	m, err := ParseGridMap(b)
	if err != nil {
		return fmt.Errorf("grid-mapfile %s: %w", v.cfg.GridMap, err)
	}
	v.mu.Lock()
	v.gridmap, v.gmMtime, v.gridSize = m, fi.ModTime(), fi.Size()
	v.mu.Unlock()
	return nil
}

// mapped is the grid-mapfile name of dn, "" when none.
func (v *Verifier) mapped(dn string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.gridmap[dn]
}

package x509auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// GridMap maps OpenSSL one-line DNs to local names.
type GridMap map[string][]string

// Name is the first local name mapped to dn ("" when none). DNs written
// with the attribute names of older OpenSSL versions ("/Email=",
// "/E=", "/USERID=") match today's ("/emailAddress=", "/UID=").
func (m GridMap) Name(dn string) string {
	if names := m[normalizeDN(dn)]; len(names) > 0 {
		return names[0]
	}
	return ""
}

// normalizeDN rewrites the attribute names older OpenSSL releases printed
// into the ones OpenSSL prints now.
func normalizeDN(dn string) string {
	if !strings.Contains(dn, "/E") && !strings.Contains(dn, "/USERID=") {
		return dn
	}
	var b strings.Builder
	for i := 0; i < len(dn); i++ {
		b.WriteByte(dn[i])
		if dn[i] != '/' || i > 0 && dn[i-1] == '\\' {
			continue // an escaped '/' inside a value
		}
		for _, r := range [...][2]string{{"Email=", "emailAddress="}, {"E=", "emailAddress="}, {"USERID=", "UID="}} {
			if strings.HasPrefix(dn[i+1:], r[0]) {
				b.WriteString(r[1])
				i += len(r[0])
				break
			}
		}
	}
	return b.String()
}

// ParseGridMap reads a grid-mapfile (Globus format): per line a DN, in
// double quotes when it holds spaces, then a local name or a comma
// separated list of names (the first is the one used); '#' starts a
// comment line. Inside quotes `\"` and `\\` stand for `"` and `\`; any
// other backslash is part of the DN (OpenSSL's `\/` and `\xC3`). A DN
// listed twice keeps its first line, as Globus's lookup does. Errors name
// the line.
func ParseGridMap(b []byte) (GridMap, error) {
	m := GridMap{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		dn, names, err := parseGridMapLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if dn == "" {
			continue
		}
		dn = normalizeDN(dn)
		if _, dup := m[dn]; !dup {
			m[dn] = names
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// parseGridMapLine returns "" for a blank or comment line.
func parseGridMapLine(line string) (dn string, names []string, err error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", nil, nil
	}
	var rest string
	if line[0] == '"' {
		var b strings.Builder
		i := 1
		for ; i < len(line) && line[i] != '"'; i++ {
			if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
				i++
			}
			b.WriteByte(line[i])
		}
		if i >= len(line) {
			return "", nil, errors.New("unterminated quoted DN")
		}
		dn, rest = b.String(), line[i+1:]
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
			return "", nil, errors.New("want white space after the quoted DN")
		}
	} else {
		end := strings.IndexAny(line, " \t")
		if end < 0 {
			return "", nil, errors.New(`want "/DN" name`)
		}
		dn, rest = line[:end], line[end:]
	}
	if !strings.HasPrefix(dn, "/") || !strings.Contains(dn, "=") {
		return "", nil, fmt.Errorf("DN %q is not in OpenSSL's one-line form (/DC=org/CN=Alice)", dn)
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return "", nil, fmt.Errorf("no local name after DN %q", dn)
	}
	for name := range strings.SplitSeq(rest, ",") {
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, " \t\"#") {
			return "", nil, fmt.Errorf("bad local name %q", name)
		}
		names = append(names, name)
	}
	return dn, names, nil
}

// gridMapState is one load of the grid-mapfile.
type gridMapState struct {
	m       GridMap
	modTime time.Time
	size    int64
}

// loadGridMap reads path unless old already holds this version of it.
// The error names the file and the line.
func loadGridMap(path string, old *gridMapState) (*gridMapState, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("grid-mapfile: %w", err)
	}
	if old != nil && fi.ModTime().Equal(old.modTime) && fi.Size() == old.size {
		return old, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("grid-mapfile: %w", err)
	}
	m, err := ParseGridMap(b)
	if err != nil {
		return nil, fmt.Errorf("grid-mapfile %s: %w", path, err)
	}
	return &gridMapState{m: m, modTime: fi.ModTime(), size: fi.Size()}, nil
}

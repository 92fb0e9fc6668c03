package xrootd

import (
	"fmt"
	"strconv"
	"strings"
)

// StatInfo is a stat answer (kXR_stat, kXR_open with retstat, each entry of
// a dirlist with dstat), a line of space-separated fields:
//
//	<id> <size> <flags> <mtime> [<ctime> <atime> <mode octal> <owner> <group>] [[ <alg>:<value> ]]
type StatInfo struct {
	ID    string // opaque; XRootD sends device and inode as one number
	Size  int64
	Flags StatFlags
	MTime int64 // Unix seconds
	// Extended fields (servers of protocol 5 send them).
	Extended     bool
	CTime, ATime int64
	Mode         uint32 // permission bits
	Owner, Group string
	// Checksum is "alg:value" in dirlist entries with DirlistDCksum.
	Checksum string
}

// String returns s's wire form (without the NUL a stat answer ends with).
func (s StatInfo) String() string { return string(s.Append(nil)) }

// Append appends s's wire form.
func (s StatInfo) Append(dst []byte) []byte {
	id := s.ID
	if id == "" || strings.ContainsAny(id, " \n\x00") {
		id = "0"
	}
	dst = append(dst, id...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, s.Size, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(s.Flags), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, s.MTime, 10)
	if s.Extended {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, s.CTime, 10)
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, s.ATime, 10)
		dst = append(dst, ' ')
		dst = fmt.Appendf(dst, "%04o", s.Mode&07777)
		dst = append(dst, ' ')
		dst = append(dst, token(s.Owner)...)
		dst = append(dst, ' ')
		dst = append(dst, token(s.Group)...)
	}
	if s.Checksum != "" {
		dst = append(dst, " [ "...)
		dst = append(dst, token(s.Checksum)...)
		dst = append(dst, " ]"...)
	}
	return dst
}

// token makes s one field: no spaces, newlines or NULs, never empty.
func token(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\t' || r == 0 {
			return '_'
		}
		return r
	}, s)
	if s == "" {
		return "-"
	}
	return s
}

// ParseStat parses a stat line (a trailing NUL is ignored).
func ParseStat(line string) (StatInfo, error) {
	var s StatInfo
	line = trimNUL(line)
	if i := strings.Index(line, " [ "); i >= 0 {
		ck := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line[i+3:]), "]"))
		s.Checksum = ck
		line = line[:i]
	}
	f := strings.Fields(line)
	if len(f) < 4 {
		return s, fmt.Errorf("stat %q: %d fields, want at least 4: %w", line, len(f), ErrMalformed)
	}
	var err error
	s.ID = f[0]
	if s.Size, err = strconv.ParseInt(f[1], 10, 64); err != nil || s.Size < 0 {
		return s, fmt.Errorf("stat %q: size: %w", line, ErrMalformed)
	}
	fl, err := strconv.ParseInt(f[2], 10, 32)
	if err != nil {
		return s, fmt.Errorf("stat %q: flags: %w", line, ErrMalformed)
	}
	s.Flags = StatFlags(fl)
	if s.MTime, err = strconv.ParseInt(f[3], 10, 64); err != nil {
		return s, fmt.Errorf("stat %q: mtime: %w", line, ErrMalformed)
	}
	if len(f) < 9 {
		return s, nil
	}
	ct, err1 := strconv.ParseInt(f[4], 10, 64)
	at, err2 := strconv.ParseInt(f[5], 10, 64)
	mode, err3 := strconv.ParseUint(f[6], 8, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return s, fmt.Errorf("stat %q: extended fields: %w", line, ErrMalformed)
	}
	s.Extended, s.CTime, s.ATime, s.Mode, s.Owner, s.Group = true, ct, at, uint32(mode)&07777, f[7], f[8]
	return s, nil
}

// DirlistStatLead opens a dirlist answer with stat lines: a "." entry with
// an all-zero stat that tells the client the server honours
// DirlistDStat.
const DirlistStatLead = ".\n0 0 0 0\n"

// DirEntry is one entry of a dirlist answer. Stat is nil when the listing
// was asked without DirlistDStat.
type DirEntry struct {
	Name string
	Stat *StatInfo
}

// AppendDirEntry appends an entry: the name and a newline, then the stat
// line and a newline when st is not nil. A complete answer has its last
// newline replaced with a NUL.
func AppendDirEntry(dst []byte, name string, st *StatInfo) []byte {
	dst = append(dst, name...)
	dst = append(dst, '\n')
	if st != nil {
		dst = st.Append(dst)
		dst = append(dst, '\n')
	}
	return dst
}

// ParseDirlist parses a complete dirlist answer (the kXR_oksofar parts and
// the final one, concatenated). With a stat lead the entries carry their
// stat.
func ParseDirlist(b []byte) ([]DirEntry, error) {
	s := strings.TrimRight(trimNUL(string(b)), "\n")
	if s == "" {
		return nil, nil
	}
	lines := strings.Split(s, "\n")
	if len(lines) >= 2 && lines[0] == "." && lines[1] == "0 0 0 0" {
		lines = lines[2:]
		if len(lines)%2 != 0 {
			return nil, fmt.Errorf("dirlist with stat: %d lines, not name and stat pairs: %w", len(lines), ErrMalformed)
		}
		out := make([]DirEntry, 0, len(lines)/2)
		for i := 0; i < len(lines); i += 2 {
			st, err := ParseStat(lines[i+1])
			if err != nil {
				return nil, fmt.Errorf("dirlist entry %q: %w", lines[i], err)
			}
			out = append(out, DirEntry{Name: lines[i], Stat: &st})
		}
		return out, nil
	}
	out := make([]DirEntry, 0, len(lines))
	for _, l := range lines {
		if l != "" {
			out = append(out, DirEntry{Name: l})
		}
	}
	return out, nil
}

// Location is one entry of a kXR_locate answer.
type Location struct {
	Kind   byte   // 'S' server, 's' server pending, 'M' manager, 'm' manager pending
	Access byte   // 'r' read, 'w' read-write
	Addr   string // host:port or [ipv6]:port
}

// AppendLocations appends a locate answer: the entries separated by
// spaces (the caller adds the NUL XRootD ends it with).
func AppendLocations(dst []byte, locs []Location) []byte {
	for i, l := range locs {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, l.Kind, l.Access)
		dst = append(dst, token(l.Addr)...)
	}
	return dst
}

// ParseLocations parses a locate answer.
func ParseLocations(b []byte) ([]Location, error) {
	var out []Location
	for _, f := range strings.Fields(trimNUL(string(b))) {
		if len(f) < 3 || !strings.ContainsRune("SsMm", rune(f[0])) || (f[1] != 'r' && f[1] != 'w') {
			return nil, fmt.Errorf("locate entry %q: %w", f, ErrMalformed)
		}
		out = append(out, Location{Kind: f[0], Access: f[1], Addr: f[2:]})
	}
	return out, nil
}

// ParseChecksum parses a checksum query answer "<alg> <value>".
func ParseChecksum(b []byte) (alg, value string, err error) {
	f := strings.Fields(trimNUL(string(b)))
	if len(f) != 2 {
		return "", "", fmt.Errorf("checksum answer %q: %w", trimNUL(string(b)), ErrMalformed)
	}
	return f[0], f[1], nil
}

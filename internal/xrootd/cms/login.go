package cms

import (
	"fmt"
	"strings"
)

// Login modes (CmsLoginData::LoginMode): the role a node logs in with,
// and its state.
const (
	ModeDirector = 0x00000001 // an xrootd redirector asking its cmsd
	ModeManager  = 0x00000002
	ModePeer     = 0x00000004
	ModeServer   = 0x00000008
	ModeProxy    = 0x00000010
	ModeSubman   = 0x00000020
	ModeBLRedir  = 0x00000040 // takes blacklist redirects (try at login)
	ModeSuspend  = 0x00000100 // logs in suspended (its xrootd is not up)
	ModeNoStage  = 0x00000200 // cannot stage files
	ModeTrying   = 0x00000400 // has been retrying its login for long
	ModeDebug    = 0x80000000
	// The share (meta-managers: a percentage) and the time zone live in
	// the high bits.
	ModeShareMask  = 0x7f000000
	ModeShareShift = 24
	ModeTZoneMask  = 0x00f80000
	ModeTZoneShift = 19
)

// Login is the data of a login request and of its answer
// (CmsLoginData). A node sends its role, space and exports; the manager
// answers with its own version, mode, hold time, system ID and
// environment.
type Login struct {
	Version  uint16
	Mode     uint32
	HoldTime int32 // a node: its process id; a manager: its hold time in ms
	// TotalMB, FreeMB and MinFreeMB are the node's space in MiB: total
	// (YProtocol.hh says GB; cmsd sends MiB),
	// free in MiB (its largest file system's), and the free space under
	// which it takes no new files, in MiB.
	TotalMB, FreeMB, MinFreeMB uint32
	// NumFS is its number of file systems, FSUtil their use in percent.
	NumFS, FSUtil uint16
	// DataPort is where clients are sent (the xroot port); SubsPort the
	// node's own cms port (a manager's, for alternates).
	DataPort, SubsPort uint16
	// SID is the system ID: "<type>-<instance> <cluster id>".
	SID string
	// Paths are the exports, one "type path" per line (ParsePaths).
	Paths string
	// IfList names the node's network interfaces; EnvCGI is
	// "key=value&..." (myHN, site).
	IfList, EnvCGI string
}

// Data packs the login.
func (l Login) Data() ([]byte, error) {
	var p Packer
	p.Short(l.Version)
	p.Int(l.Mode)
	p.Int(uint32(l.HoldTime))
	p.Int(l.TotalMB)
	p.Int(l.FreeMB)
	p.Int(l.MinFreeMB)
	p.Short(l.NumFS)
	p.Short(l.FSUtil)
	p.Short(l.DataPort)
	p.Short(l.SubsPort)
	p.String(l.SID)
	p.String(l.Paths)
	p.String(l.IfList)
	p.String(l.EnvCGI)
	b, err := p.Bytes()
	if err == nil && len(b) > MaxLoginData {
		err = fmt.Errorf("cms: login data of %d bytes, cmsd takes at most %d (too many exports?)", len(b), MaxLoginData)
	}
	return b, err
}

// ParseLogin unpacks a login's data.
func ParseLogin(data []byte) (Login, error) {
	u := NewUnpacker(data)
	l := Login{
		Version:   u.Short("version"),
		Mode:      u.Int("mode"),
		HoldTime:  int32(u.Int("hold time")),
		TotalMB:   u.Int("total space"),
		FreeMB:    u.Int("free space"),
		MinFreeMB: u.Int("minimum free space"),
		NumFS:     u.Short("file systems"),
		FSUtil:    u.Short("utilization"),
		DataPort:  u.Short("data port"),
		SubsPort:  u.Short("subscription port"),
	}
	u.Fence()
	l.SID = u.String("system id")
	l.Paths = u.String("paths")
	l.IfList = u.String("interfaces")
	l.EnvCGI = u.String("environment")
	if err := u.Err(); err != nil {
		return Login{}, fmt.Errorf("login: %w", err)
	}
	return l, nil
}

// Role names a login mode's role as cmsd logs it.
func Role(mode uint32) string {
	switch man, srv := mode&ModeManager != 0, mode&ModeServer != 0; {
	case mode&ModeDirector != 0:
		return "redirector"
	case man && srv:
		return "supervisor"
	case man:
		return "manager"
	case srv && mode&ModeProxy != 0:
		return "proxy server"
	case srv:
		return "server"
	case mode&ModePeer != 0:
		return "peer"
	}
	return "unknown"
}

// PathEntry is one export of a login: Type is r (read only), w or rw
// (read and write), with s for staging.
type PathEntry struct {
	Type string
	Path string
}

// Writable reports a w in the type.
func (e PathEntry) Writable() bool { return strings.Contains(e.Type, "w") }

// ParsePaths reads a login's Paths: one "type path" per line. A line
// whose type has other letters than r, w and s is an error (cmsd refuses
// such a login).
func ParsePaths(s string) ([]PathEntry, error) {
	var out []PathEntry
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, malformed("exported path line %q", line)
		}
		if strings.Trim(f[0], "rws") != "" || f[0] == "" {
			return nil, malformed("exported path type %q", f[0])
		}
		out = append(out, PathEntry{Type: f[0], Path: f[1]})
	}
	return out, nil
}

// FormatPaths writes Paths for a login.
func FormatPaths(entries []PathEntry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Type)
		b.WriteByte(' ')
		b.WriteString(e.Path)
	}
	return b.String()
}

// Env reads the value of key in a login's EnvCGI ("" when absent).
func Env(cgi, key string) string {
	for _, kv := range strings.Split(cgi, "&") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

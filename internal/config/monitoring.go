package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Monitoring reports to the monitoring outside wanda (docs/monitoring.md):
// XRootD's UDP streams, which XRootD's collectors take, and WLCG's
// storage resource reporting (SRR).
type Monitoring struct {
	XRootD XRootDMonitoring `yaml:"xrootd"`
	SRR    SRR              `yaml:"srr"`
}

// XRootDMonitoring is what `xrootd.monitor` and `xrd.report` configure
// in XRootD: the detailed streams sent to Destinations (--monitor-udp),
// the summary to Report (--report-udp). Off without destinations.
type XRootDMonitoring struct {
	// Destinations of the detailed streams, host:port (UDP).
	Destinations []string `yaml:"destinations"`
	// What they carry, as xrootd.monitor's dest events: User the
	// logins; Info the clients' info texts; Redir the redirections (a
	// redirector's); Files the trace stream's opens and closes with their
	// path records, IO its reads and writes too (heavy: a record per
	// request); Cache a cache's g-stream (XCache's pfc records).
	User  bool `yaml:"user"`
	Info  bool `yaml:"info"`
	Redir bool `yaml:"redir"`
	Files bool `yaml:"files"`
	IO    bool `yaml:"io"`
	Cache bool `yaml:"cache"`
	// Auth adds how a user was authenticated (protocol, identity) to the
	// user records (xrootd.monitor's auth).
	Auth bool `yaml:"auth"`
	// FStat is the file stream's interval, as xrootd.monitor's fstat
	// <sec> (0: no file stream): opens with path and size, transfers,
	// closes with bytes and operations, disconnections. LFN puts the
	// paths in its opens, Ops request counts and sizes in its closes; Xfr
	// reports the bytes of open files every Xfr intervals (0: never).
	FStat Interval `yaml:"fstat"`
	LFN   bool     `yaml:"lfn"`
	Ops   bool     `yaml:"ops"`
	Xfr   int      `yaml:"xfr"`
	// Flush is the longest the other streams' records wait in a packet
	// (flush <sec>); Window the trace stream's time marks; Ident the time
	// between server identifications.
	Flush  Interval `yaml:"flush"`
	Window Interval `yaml:"window"`
	Ident  Interval `yaml:"ident"`
	// Resolve names clients by their host names (reverse lookups,
	// cached), as XRootD does; false: by address (XRootD's nodnr).
	Resolve bool `yaml:"resolve"`
	// Queue bounds the events waiting for the sender: more are dropped
	// and counted (wanda_xrootd_monitor_dropped_total), never waited for.
	Queue int `yaml:"queue"`
	// Report are the destinations of the summary (xrd.report), every
	// ReportInterval.
	Report         []string `yaml:"report"`
	ReportInterval Interval `yaml:"report_interval"`
	// Site names the site in the server identification (XRDSITE;
	// default: the federation's "site" label); Instance the instance
	// (default "anon", as an unnamed xrootd).
	Site     string `yaml:"site"`
	Instance string `yaml:"instance"`
}

// DefaultXRootDMonitoring are OSG's recommended settings: the file
// stream every minute with paths, operations and transfer progress, user
// logins with authentication, info and redirections.
func DefaultXRootDMonitoring() XRootDMonitoring {
	return XRootDMonitoring{
		User: true, Info: true, Redir: true, Cache: true, Auth: true,
		FStat: Interval(time.Minute), LFN: true, Ops: true, Xfr: 5,
		Flush: Interval(30 * time.Second), Window: Interval(time.Minute), Ident: Interval(time.Hour), Resolve: true, Queue: 10000,
		ReportInterval: Interval(time.Minute),
	}
}

// Interval is a duration written as Go writes them ("60s", "1m") or, as
// xrootd.monitor does, a number of seconds (60).
type Interval time.Duration

// D is the interval as a time.Duration.
func (i Interval) D() time.Duration { return time.Duration(i) }

// UnmarshalText parses "60s", "1m" or 60 (seconds).
func (i *Interval) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*i = Interval(time.Duration(n) * time.Second)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (60s, 1m) nor a number of seconds", s)
	}
	*i = Interval(d)
	return nil
}

// SRR is the WLCG storage resource reporting document every server
// serves at /.well-known/srr (and at Path).
type SRR struct {
	// Path serves the document at one more path (e.g. "/srr").
	Path string `yaml:"path"`
	// Interval is how often the numbers are refreshed.
	Interval time.Duration `yaml:"interval"`
	// Name and ID name the storage service (default: the host name);
	// QualityLevel is development, testing, pre-production or production.
	Name         string `yaml:"name"`
	ID           string `yaml:"id"`
	QualityLevel string `yaml:"quality_level"`
	// VOs are the VOs of the shares that name none.
	VOs []string `yaml:"vos"`
	// Shares are quota areas reported besides the exports: a logical
	// path, its quota (its totalsize) and VOs; usedsize is the size of
	// what it holds.
	Shares []SRRShare `yaml:"shares"`
}

// SRRShare is a quota area.
type SRRShare struct {
	Name  string   `yaml:"name"`
	Path  string   `yaml:"path"`
	Quota Size     `yaml:"quota"`
	VOs   []string `yaml:"vos"`
}

// DefaultSRR refreshes every 5 minutes, production quality.
func DefaultSRR() SRR { return SRR{Interval: 5 * time.Minute, QualityLevel: "production"} }

// Enabled reports whether detailed streams are sent.
func (m XRootDMonitoring) Enabled() bool { return len(m.Destinations) > 0 }

func checkUDP(key, hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port", key, hp)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return fmt.Errorf("%s: %q is not host:port", key, hp)
	}
	return nil
}

func (c Monitoring) validate() []error {
	var errs []error
	m := c.XRootD
	for i, d := range m.Destinations {
		if err := checkUDP(fmt.Sprintf("monitoring.xrootd.destinations[%d]", i), d); err != nil {
			errs = append(errs, err)
		}
	}
	for i, d := range m.Report {
		if err := checkUDP(fmt.Sprintf("monitoring.xrootd.report[%d]", i), d); err != nil {
			errs = append(errs, err)
		}
	}
	if m.FStat != 0 && m.FStat.D() < time.Second {
		errs = append(errs, fmt.Errorf("monitoring.xrootd.fstat: %v: 0 (no file stream) or at least 1s", m.FStat.D()))
	}
	if m.Flush.D() < time.Second || m.Window.D() < time.Second {
		errs = append(errs, errors.New("monitoring.xrootd.flush, window: at least 1s"))
	}
	if m.Xfr < 0 || m.Queue < 1 {
		errs = append(errs, errors.New("monitoring.xrootd.xfr: not negative; queue: at least 1"))
	}
	if len(m.Report) > 0 && m.ReportInterval.D() < time.Second {
		errs = append(errs, errors.New("monitoring.xrootd.report_interval: at least 1s"))
	}
	s := c.SRR
	if s.Path != "" && (!strings.HasPrefix(s.Path, "/") || strings.ContainsAny(s.Path, "?#")) {
		errs = append(errs, fmt.Errorf("monitoring.srr.path: %q is not an absolute path", s.Path))
	}
	if s.Interval < time.Second {
		errs = append(errs, errors.New("monitoring.srr.interval: at least 1s"))
	}
	switch s.QualityLevel {
	case "development", "testing", "pre-production", "production":
	default:
		errs = append(errs, fmt.Errorf("monitoring.srr.quality_level: %q is not development, testing, pre-production or production", s.QualityLevel))
	}
	for i, sh := range s.Shares {
		key := fmt.Sprintf("monitoring.srr.shares[%d]", i)
		if sh.Name == "" || !strings.HasPrefix(sh.Path, "/") {
			errs = append(errs, fmt.Errorf("%s: a name and an absolute logical path", key))
		}
		if sh.Quota < 0 {
			errs = append(errs, fmt.Errorf("%s.quota: negative", key))
		}
	}
	return errs
}

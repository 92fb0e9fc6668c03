package xrdpeer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Options configure a data server.
type Options struct {
	// Dir is the directory served (oss.localroot): the logical name /a/b
	// is Dir/a/b. Required.
	Dir string
	// Export is the logical prefix exported (all.export); default "/".
	Export string
	// Work holds the configuration, the admin directory and the log;
	// default a fresh temporary directory that Close removes.
	Work string
	// Writable gives Dir and everything in it to the daemons' user, so
	// that clients may write; otherwise Dir is only made readable to it.
	Writable bool
	// Checksum is the xrootd.chksum algorithm; default adler32, "none"
	// for no checksums.
	Checksum string
	// HTTP adds XrdHttp on a second port (http.listingdeny false).
	HTTP bool
	// TLSCert and TLSKey (PEM files) enable TLS (xrd.tls, with
	// `xrd.tlsca noverify` unless CADir is set): roots://, TLS on a
	// root:// connection when the client asks, and https on XrdHttp's
	// port. They are given to the daemons' user.
	TLSCert, TLSKey string
	// CADir is a directory of CA certificates in OpenSSL's hashed form
	// (see WriteCADir) the server trusts: `xrd.tlsca certdir CADir`
	// instead of noverify. XrdHttp verifies client certificates with it
	// when a client presents one, and XrdHttpTPC's libcurl verifies the
	// servers it pulls from or pushes to with it. With HTTPTPC it
	// defaults to a directory in Work holding the certificates of
	// TLSCert: its CA when TLSCert is a chain as CA.ServerCert makes,
	// itself when it is self-signed. The daemon also gets it as
	// X509_CERT_DIR, for the XRootD clients it runs (root:// TPC's copy
	// program).
	CADir string
	// HTTPTPC loads XrdHttpTPC (`http.exthandler xrdtpc
	// libXrdHttpTPC.so`): XrdHttp takes WLCG HTTP third-party-copy COPY
	// requests (Source: pull, Destination: push). It implies HTTP and
	// needs TLSCert and TLSKey: XRootD 5.5.3 loads XrdHttp's external
	// handlers only once HTTPS is configured, and XrdHttpTPC refuses to
	// load without a CA directory or file for its libcurl. See the
	// package documentation for what it does and does not do.
	HTTPTPC bool
	// RootTPC enables root:// third-party copy (`ofs.tpc autorm logok
	// echo pgm xrdcp --server`; with Tokens also `fcreds ?ztn
	// =BEARER_TOKEN_FILE`): as a source it authorizes destinations that
	// show the key a client registered (tpc.key), as a destination it
	// pulls with XRootD's xrdcp run as a child. xrdcp --tpc only drives
	// it.
	RootTPC bool
	// Tokens, when set, makes the server take bearer tokens: SciTokens
	// authorization, ztn over root:// (TLS only), Authorization over
	// XrdHttp. See Tokens.
	Tokens *Tokens
	// Plugins are plugin libraries the configuration needs (stems such
	// as "libXrdPss"); one missing is ErrNotInstalled. HTTP adds
	// libXrdHttp.
	Plugins []string
	// Monitor sends XRootD's detailed monitoring streams to this
	// host:port over UDP: `xrootd.monitor MonitorOptions dest
	// MonitorEvents Monitor`, by default as OSG runs it with short
	// intervals — "all flush 1s fstat 1s lfn ops xfr 5" and "fstat info
	// user redir".
	Monitor, MonitorOptions, MonitorEvents string
	// Report sends the summary stream to this host:port: `xrd.report
	// Report every ReportEvery all` (default every 2s).
	Report      string
	ReportEvery string
	// Extra lines end the configuration (so they override earlier ones).
	Extra []string
	// LogPath is the daemon's log; default Work/admin/xrootd.log.
	LogPath string
	// Log receives a line when the daemon started; nil: none.
	Log *slog.Logger
}

// Server is a running XRootD data server (one xrootd; in a Cluster also
// its cmsd).
type Server struct {
	// Addr is host:port of its xroot protocol: root://Addr//name.
	Addr string
	// HTTP is XrdHttp's base URL ("http://127.0.0.1:P") when asked for.
	HTTP string
	// HTTPS is the same port's URL over TLS ("https://127.0.0.1:P") when
	// TLSCert is set too (XrdHttp tells TLS from plain HTTP by the first
	// bytes).
	HTTPS string
	// CADir is the CA directory the server trusts (Options.CADir or the
	// one made for HTTPTPC); "" with `xrd.tlsca noverify`.
	CADir string
	// Dir and Export are the served directory and the logical prefix.
	Dir, Export string
	// LogPath is its xrootd's log.
	LogPath string

	daemons []*Daemon // stopped in reverse order
	scratch scratch   // Reach's release, a temporary Work
	once    sync.Once
}

// URL is root://Addr//name (name is a logical path, "/a/b").
func (s *Server) URL(name string) string {
	return "root://" + s.Addr + "/" + "/" + strings.TrimPrefix(name, "/")
}

// Pid is the process id of its xrootd (for its memory and CPU).
func (s *Server) Pid() int { return s.daemons[0].Pid() }

// Path is the local file of a logical name.
func (s *Server) Path(name string) string {
	return filepath.Join(s.Dir, filepath.FromSlash(name))
}

// LogTail is the last n lines of its xrootd's log.
func (s *Server) LogTail(n int) string { return Tail(s.LogPath, n) }

// Close stops the server's daemons (bounded: see Daemon.Stop), puts the
// modes of Dir's and Work's ancestors back and removes a temporary Work.
// The data in Dir stays.
func (s *Server) Close() error {
	s.once.Do(func() {
		var wg sync.WaitGroup
		for _, d := range s.daemons {
			wg.Go(d.Stop)
		}
		wg.Wait()
		s.scratch.close()
	})
	return nil
}

// Start starts an XRootD data server exporting o.Dir on loopback and
// returns once it accepts connections (on every port it has) and its log
// says it initialized. ctx bounds the start; the server runs until
// Close. Without XRootD (or, as root, without the xrootd user or
// setpriv) the error matches ErrNotInstalled.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("xrdpeer: Options.Dir is required")
	}
	if o.HTTPTPC {
		o.HTTP = true
		if o.TLSCert == "" || o.TLSKey == "" {
			return nil, errors.New("xrdpeer: HTTPTPC needs TLSCert and TLSKey (XRootD 5.5.3 loads XrdHttpTPC only with HTTPS)")
		}
	}
	plugins := o.Plugins
	if o.HTTPTPC {
		plugins = append(plugins, "libXrdHttpTPC")
	}
	if o.HTTP {
		plugins = append([]string{"libXrdHttp"}, plugins...)
	}
	if o.Tokens != nil {
		plugins = append(plugins, "libXrdAccSciTokens", "libXrdSecztn")
	}
	bins := []string{"xrootd"}
	if o.RootTPC {
		bins = append(bins, "xrdcp")
	}
	acct, err := runAs(bins...)
	if err != nil {
		return nil, err
	}
	for _, p := range plugins {
		if !HavePlugin(p) {
			return nil, fmt.Errorf("%w: the plugin %s is missing (%s)", ErrNotInstalled, p, installHint)
		}
	}
	s := &Server{Dir: o.Dir, Export: o.Export}
	if s.Export == "" {
		s.Export = "/"
	}
	work, err := s.scratch.work(o.Work)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		s.Close()
		return nil, err
	}
	admin := filepath.Join(work, "admin")
	if err := os.MkdirAll(admin, 0o755); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fail(err)
	}
	if o.HTTPTPC && o.CADir == "" {
		o.CADir = filepath.Join(work, "ca")
		if err := tlsCertCADir(o.CADir, o.TLSCert); err != nil {
			return fail(err)
		}
	}
	s.CADir = o.CADir
	reach := []string{o.Dir, admin}
	if o.TLSCert != "" {
		reach = append(reach, o.TLSCert, o.TLSKey)
	}
	if o.CADir != "" {
		reach = append(reach, o.CADir)
	}
	if o.LogPath != "" {
		reach = append(reach, o.LogPath)
	}
	if acct.uid >= 0 {
		if s.scratch.release, err = Reach(reach...); err != nil {
			return fail(fmt.Errorf("xrdpeer: let the xrootd user reach %s: %w", o.Dir, err))
		}
		owned := []string{admin}
		if o.Writable {
			owned = append(owned, o.Dir)
		} else if err := Readable(o.Dir); err != nil {
			return fail(fmt.Errorf("xrdpeer: make %s readable: %w", o.Dir, err))
		}
		if o.TLSCert != "" {
			owned = append(owned, o.TLSCert, o.TLSKey)
		}
		for _, p := range owned {
			if err := acct.own(p); err != nil {
				return fail(fmt.Errorf("xrdpeer: give %s to the xrootd user: %w", p, err))
			}
		}
	}
	var more, env []string
	if o.Tokens != nil {
		if more, env, err = tokenSetup(o, work, acct); err != nil {
			return fail(err)
		}
	}
	more = append(more, tpcLines(o)...)
	if o.CADir != "" {
		// XRootD's own clients in the daemon (the copy program of root://
		// TPC) trust the same CAs.
		env = append(env, "X509_CERT_DIR="+o.CADir)
	}
	s.LogPath = o.LogPath
	if s.LogPath == "" {
		s.LogPath = filepath.Join(admin, "xrootd.log")
	}
	err = retryPorts(2, func(ports []int) error {
		cfg := serverConfig(o, s.Export, admin, ports[0], ports[1], more)
		cfgPath := filepath.Join(work, "xrootd.cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		if err := newLog(acct, s.LogPath); err != nil {
			return err
		}
		s.Addr = loopback(ports[0])
		listen := []string{s.Addr}
		if o.HTTP {
			s.HTTP = "http://" + loopback(ports[1])
			listen = append(listen, loopback(ports[1]))
			if o.TLSCert != "" {
				s.HTTPS = "https://" + loopback(ports[1])
			}
		}
		d, err := StartDaemon(ctx, Command{
			Name: "xrootd", Args: append(append([]string(nil), acct.prefix...), "xrootd", "-I", "v4", "-c", cfgPath, "-l", "="+s.LogPath),
			Listen: listen, Ready: logHas(s.LogPath, "initialization completed"), LogPath: s.LogPath, Log: o.Log, Env: env,
		})
		if err != nil {
			return err
		}
		s.daemons = append(s.daemons, d)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return s, nil
}

// serverConfig is a standalone data server's configuration; more lines
// go before o.Extra.
func serverConfig(o Options, export, admin string, port, httpPort int, more []string) string {
	lines := []string{
		"all.role server",
		"all.export " + export,
		"oss.localroot " + o.Dir,
		"xrd.port " + strconv.Itoa(port),
		"xrd.allow host localhost",
		"all.adminpath " + admin,
		"all.pidpath " + admin,
	}
	switch o.Checksum {
	case "":
		lines = append(lines, "xrootd.chksum adler32")
	case "none":
	default:
		lines = append(lines, "xrootd.chksum "+o.Checksum)
	}
	if o.HTTP {
		lines = append(lines, fmt.Sprintf("xrd.protocol XrdHttp:%d libXrdHttp.so", httpPort), "http.listingdeny false")
	}
	if o.TLSCert != "" {
		ca := "xrd.tlsca noverify"
		if o.CADir != "" {
			ca = "xrd.tlsca certdir " + o.CADir
		}
		lines = append(lines, "xrd.tls "+o.TLSCert+" "+o.TLSKey, ca)
	}
	lines = append(lines, monitorLines(o)...)
	lines = append(append(lines, more...), o.Extra...)
	return strings.Join(lines, "\n") + "\n"
}

// monitorLines are the configuration of Options.Monitor and Report.
func monitorLines(o Options) []string {
	var lines []string
	if o.Monitor != "" {
		opts, events := o.MonitorOptions, o.MonitorEvents
		if opts == "" {
			opts = "all flush 1s fstat 1s lfn ops xfr 5"
		}
		if events == "" {
			events = "fstat info user redir"
		}
		lines = append(lines, "xrootd.monitor "+opts+" dest "+events+" "+o.Monitor)
	}
	if o.Report != "" {
		every := o.ReportEvery
		if every == "" {
			every = "2s"
		}
		lines = append(lines, "xrd.report "+o.Report+" every "+every+" all")
	}
	return lines
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// newLog makes an empty log file the daemon can write (a failed try's
// is emptied).
func newLog(a account, path string) error {
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return err
	}
	return a.own(path)
}

// tempWork makes a temporary directory the daemons' user can enter
// (t.TempDir's parents are 0700; os.MkdirTemp's are not).
func tempWork() (string, error) {
	dir, err := os.MkdirTemp("", "xrdpeer-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

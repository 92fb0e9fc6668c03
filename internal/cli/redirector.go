package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
)

// fedFlags are the membership flags of servers and redirectors.
type fedFlags struct {
	join      []string
	advertise string
	id        string
	labels    []string
	priority  int
	token     string
}

func (f *fedFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.join, "join", nil, "join a redirector at URL (repeatable): a wanda redirector (http(s)://HOST:PORT) or an XRootD manager (cmsd://HOST:PORT)")
	fl.StringVar(&f.advertise, "advertise", "", "URL clients are redirected to (default: from --listen)")
	fl.StringVar(&f.id, "id", "", "member ID in the federation (default: the advertised URL)")
	fl.StringArrayVar(&f.labels, "label", nil, "a label KEY=VALUE for replica selection, e.g. site=A (repeatable)")
	fl.IntVar(&f.priority, "priority", 0, "replica priority: lower is preferred")
	fl.StringVar(&f.token, "token", "", "bearer token for the federation (or WANDA_FED_TOKEN)")
}

// apply merges the flags that were given into a federation section.
func (f *fedFlags) apply(cmd *cobra.Command, join *[]string, advertise, id *string, labels *map[string]string, priority *int, token *string) error {
	*join = append(*join, f.join...)
	ch := cmd.Flags().Changed
	if ch("advertise") {
		*advertise = f.advertise
	}
	if ch("id") {
		*id = f.id
	}
	if ch("priority") {
		*priority = f.priority
	}
	if ch("token") {
		*token = f.token
	} else if *token == "" {
		*token = envToken()
	}
	for _, l := range f.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return usagef("--label %q: want KEY=VALUE", l)
		}
		if *labels == nil {
			*labels = map[string]string{}
		}
		(*labels)[k] = v
	}
	return nil
}

func newRedirectorCmd() *cobra.Command {
	var (
		cfgFile, listen, logLevel, logFormat string
		check                                bool
		ff                                   fedFlags
		af                                   authFlags
		rf                                   recordsFlags
		mf                                   monitorFlags
		members                              []string
		cmsdListen                           string
		cmsdAllow                            []string
	)
	var sel string // --select
	cmd := &cobra.Command{
		Use:   "redirector [--config FILE] [--listen HOST:PORT] [--join PARENT]...",
		Short: "Locate files across servers and sites and redirect clients to them",
		Long: `Run a redirector: servers (wanda server --join URL), caches and child
redirectors join it; it finds where a logical file is and redirects clients
there (HTTP 307 with the other replicas as Link alternates). Redirectors
stack: site -> region -> global, by joining a parent with --join.

  wanda redirector --listen 127.0.0.1:1095
  wanda server --export /store=/srv/store --join http://127.0.0.1:1095
  wanda redirector --listen 127.0.0.1:1096 --join http://global:1095 --label site=A

XRootD's cmsd trees (CMS's AAA): --join cmsd://HOST:PORT logs in to an
XRootD manager or meta-manager as a manager of this redirector's members;
--cmsd-listen HOST:PORT takes logins of XRootD servers and site redirectors
(all.manager [meta] HOST:PORT).

The federation API is under /api/v1/ (docs/federation.md); /metrics and
/healthz are on the same port.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if cfgFile != "" {
				var err error
				if cfg, err = config.Load(cfgFile); err != nil {
					return err
				}
			}
			r := &cfg.Redirector
			if err := ff.apply(cmd, &r.Join, &r.Advertise, &r.ID, &r.Labels, &r.Priority, &r.Token); err != nil {
				return err
			}
			if err := af.apply(cmd, &cfg.Auth, &r.TLS); err != nil {
				return err
			}
			for _, spec := range members {
				m, err := parseStaticMember(spec)
				if err != nil {
					return err
				}
				r.Members = append(r.Members, m)
			}
			if cmd.Flags().Changed("listen") {
				r.Listen = listen
			}
			if cmd.Flags().Changed("cmsd-listen") {
				r.CmsdListen = cmsdListen
			}
			if cmd.Flags().Changed("select") {
				r.Select = sel
			}
			r.CmsdAllow = append(r.CmsdAllow, cmsdAllow...)
			if cmd.Flags().Changed("log-level") {
				cfg.Log.Level = logLevel
			}
			if cmd.Flags().Changed("log-format") {
				cfg.Log.Format = logFormat
			}
			if err := rf.apply(cmd, &cfg.Records); err != nil {
				return err
			}
			mf.apply(cmd, &cfg.Monitoring)
			if err := cfg.ValidateRedirector(); err != nil {
				return usageError{err}
			}
			app.Version = Version
			log := app.NewLogger(cfg.Log, cmd.ErrOrStderr())
			rd, err := app.NewRedirector(cfg, log, prometheus.NewRegistry())
			if err != nil {
				return err
			}
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "wanda redirector: the configuration is valid (listen %s); --check: not serving\n", r.Listen)
				return nil
			}
			ln, err := app.Listen(r.Listen)
			if err != nil {
				return err
			}
			return rd.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgFile, "config", "", "YAML configuration file (see docs/config.md)")
	f.BoolVar(&check, "check", false, "load and check the configuration (exports, certificates, keys, policy) and exit without serving")
	f.StringVar(&listen, "listen", config.Default().Redirector.Listen, "address to serve HTTP(S) on")
	f.StringVar(&sel, "select", config.Default().Redirector.Select, "read replica selection: load, space, round-robin, random or hash (hash: the caches that joined form one cache, each file at the cache that owns it: docs/cache.md)")
	f.StringVar(&cmsdListen, "cmsd-listen", "", "take cmsd logins of XRootD servers and site redirectors on HOST:PORT (1213 by convention; docs/federation.md, Joining AAA)")
	f.StringArrayVar(&cmsdAllow, "cmsd-allow", nil, "an address or CIDR network allowed to log in at --cmsd-listen (repeatable; default loopback only)")
	f.StringArrayVar(&members, "member", nil, "a static member URL[+root://HOST:PORT]=PREFIX[,PREFIX...]: any HTTP server, asked with HEAD (root:// clients go to HOST:PORT if given, else to URL's), or root://HOST:PORT=PREFIX, an XRootD server or cmsd without HTTP, asked with kXR_stat")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	ff.add(cmd)
	af.add(cmd)
	rf.add(cmd)
	mf.add(cmd)
	return cmd
}

// parseStaticMember parses URL[+root://HOST:PORT]=PREFIX[,PREFIX...] (a
// trailing :ro on a prefix makes it read-only; the root:// address is
// where root:// clients go when it is not URL's).
func parseStaticMember(spec string) (config.StaticMember, error) {
	i := strings.LastIndex(spec, "=")
	if i <= 0 || i == len(spec)-1 {
		return config.StaticMember{}, usagef("--member %q: want URL[+root://HOST:PORT]=PREFIX[,PREFIX...], e.g. http://host:8080=/store", spec)
	}
	m := config.StaticMember{URL: spec[:i]}
	if u, root, ok := strings.Cut(m.URL, "+root://"); ok {
		m.URL, m.XRootD = u, strings.TrimSuffix(root, "/")
	}
	for _, p := range strings.Split(spec[i+1:], ",") {
		p, ro := strings.CutSuffix(p, ":ro")
		m.Exports = append(m.Exports, config.Export{Prefix: p, ReadOnly: ro})
	}
	if len(m.Exports) == 0 {
		return m, usagef("--member %q: no prefix", spec)
	}
	return m, nil
}

func envToken() string { return strings.TrimSpace(os.Getenv("WANDA_FED_TOKEN")) }

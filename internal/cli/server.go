package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
)

func newServerCmd() *cobra.Command {
	var (
		cfgFile, listen, logLevel, logFormat, bufferMemory, tpcCA string
		check                                                     bool
		exports, exportsRO, tpcAllow                              []string
		ff                                                        fedFlags
		af                                                        authFlags
		rf                                                        recordsFlags
		mf                                                        monitorFlags
	)
	cmd := &cobra.Command{
		Use:   "server [--config FILE] [--export PREFIX=DIR]... [--listen HOST:PORT]",
		Short: "Serve local directories over HTTP/WebDAV",
		Long: `Serve local directories under logical prefixes over HTTP(S)/WebDAV.

  wanda server --export /store=/srv/data --listen 127.0.0.1:1094
  wanda server --config /etc/wanda/server.yaml

Flags override the config file; --export adds to its exports.
/metrics (Prometheus) and /healthz are served on the same port.
--join URL makes it a member of a redirector (docs/federation.md):

  wanda server --export /store=/data/cms/store --join http://redirector:1095 --label site=A`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if cfgFile != "" {
				var err error
				if cfg, err = config.Load(cfgFile); err != nil {
					return err
				}
			}
			for _, spec := range exports {
				e, err := parseExport(spec, false)
				if err != nil {
					return err
				}
				cfg.Server.Exports = append(cfg.Server.Exports, e)
			}
			for _, spec := range exportsRO {
				e, err := parseExport(spec, true)
				if err != nil {
					return err
				}
				cfg.Server.Exports = append(cfg.Server.Exports, e)
			}
			if cmd.Flags().Changed("listen") {
				cfg.Server.Listen = listen
			}
			if cmd.Flags().Changed("buffer-memory") {
				if err := cfg.Server.BufferMemory.UnmarshalText([]byte(bufferMemory)); err != nil {
					return usagef("--buffer-memory %q: %v", bufferMemory, err)
				}
			}
			cfg.Server.TPC.Allow = append(cfg.Server.TPC.Allow, tpcAllow...)
			if cmd.Flags().Changed("tpc-ca") {
				cfg.Server.TPC.CA = tpcCA
			}
			if err := af.apply(cmd, &cfg.Auth, &cfg.Server.TLS); err != nil {
				return err
			}
			fc := &cfg.Server.Federation
			if err := ff.apply(cmd, &fc.Join, &fc.Advertise, &fc.ID, &fc.Labels, &fc.Priority, &fc.Token); err != nil {
				return err
			}
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
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			app.Version = Version
			log := app.NewLogger(cfg.Log, cmd.ErrOrStderr())
			srv, err := app.NewServer(cfg, log, prometheus.NewRegistry())
			if err != nil {
				return err
			}
			defer srv.Close()
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "wanda server: the configuration is valid (listen %s); --check: not serving\n", cfg.Server.Listen)
				return nil
			}
			ln, err := app.Listen(cfg.Server.Listen)
			if err != nil {
				return err
			}
			return srv.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgFile, "config", "", "YAML configuration file (see docs/config.md)")
	f.BoolVar(&check, "check", false, "load and check the configuration (exports, certificates, keys, policy) and exit without serving")
	f.StringArrayVar(&exports, "export", nil, "export a directory or an S3 bucket: PREFIX=DIR or PREFIX=s3://BUCKET/PREFIX (repeatable)")
	f.StringArrayVar(&exportsRO, "export-ro", nil, "export a directory read-only: PREFIX=DIR (repeatable)")
	f.StringVar(&listen, "listen", config.Default().Server.Listen, "address to serve HTTP(S) on")
	f.StringVar(&bufferMemory, "buffer-memory", "64MiB", "budget of the data buffers of HTTP and root:// (server.buffer_memory; at least 24MiB)")
	f.StringArrayVar(&tpcAllow, "tpc-allow", nil, "let third-party copies reach this CIDR range, refused by default when private or loopback (server.tpc.allow; repeatable), e.g. 127.0.0.0/8")
	f.StringVar(&tpcCA, "tpc-ca", "", "CA certificates trusted for third-party copies' https:// remotes besides the system's: a PEM file or directory (server.tpc.ca; default X509_CERT_DIR, /etc/grid-security/certificates)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	ff.add(cmd)
	af.add(cmd)
	rf.add(cmd)
	mf.add(cmd)
	return cmd
}

// parseExport parses PREFIX=DIR.
func parseExport(spec string, ro bool) (config.Export, error) {
	prefix, dir, ok := strings.Cut(spec, "=")
	if !ok || prefix == "" || dir == "" {
		return config.Export{}, usagef("--export %q: want PREFIX=DIR, e.g. /store=/srv/data", spec)
	}
	if strings.HasPrefix(dir, "s3://") {
		return config.Export{Prefix: prefix, Path: dir, ReadOnly: ro}, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return config.Export{}, fmt.Errorf("--export %q: %w", spec, err)
	}
	return config.Export{Prefix: prefix, Path: abs, ReadOnly: ro}, nil
}

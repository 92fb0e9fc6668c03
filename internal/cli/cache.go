package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/cache"
	"github.com/wanda-fed/wanda/internal/config"
)

func newCacheCmd() *cobra.Command {
	var (
		cfgFile, listen, upstream, dir, maxSize, blockSize, ram, logLevel, logFormat, writes, verify string
		check                                                                                        bool
		upToken                                                                                      string
		prefetch, streams                                                                            int
		ff                                                                                           fedFlags
		af                                                                                           authFlags
		rf                                                                                           recordsFlags
		mf                                                                                           monitorFlags
	)
	var cluster string // --cluster
	cmd := &cobra.Command{
		Use:   "cache --upstream URL --dir DIR [--max-size SIZE] [--block-size SIZE] [--prefetch N] [--listen HOST:PORT] [--join REDIRECTOR]",
		Short: "A block-level caching proxy (XCache-like) in front of a server or a redirector",
		Long: `Run a cache: it serves the same read API as a server (GET/HEAD, ranges,
multi-range, PROPFIND, checksums) for the files of its upstream, fetching
blocks on demand into sparse files under --dir that survive restarts, with
prefetch for sequential readers, collapsed upstream requests, checksums per
block and LRU purging between watermarks (docs/cache.md).

  wanda cache --upstream http://origin:1094 --dir /cache --max-size 500GiB
  wanda cache stats http://127.0.0.1:1096`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if cfgFile != "" {
				var err error
				if cfg, err = config.Load(cfgFile); err != nil {
					return err
				}
			}
			k := &cfg.Cache
			ch := cmd.Flags().Changed
			set := func(name string, apply func() error) error {
				if !ch(name) {
					return nil
				}
				if err := apply(); err != nil {
					return usagef("--%s: %v", name, err)
				}
				return nil
			}
			for _, err := range []error{
				set("listen", func() error { k.Listen = listen; return nil }),
				set("upstream", func() error { k.Upstream = upstream; return nil }),
				set("dir", func() error { k.Dir = dir; return nil }),
				set("upstream-token", func() error { k.UpstreamTokenFile = upToken; return nil }),
				set("max-size", func() error { return k.MaxSize.UnmarshalText([]byte(maxSize)) }),
				set("block-size", func() error { return k.BlockSize.UnmarshalText([]byte(blockSize)) }),
				set("ram", func() error { return k.RAM.UnmarshalText([]byte(ram)) }),
				set("prefetch", func() error { k.Prefetch = prefetch; return nil }),
				set("streams", func() error { k.Streams = streams; return nil }),
				set("writes", func() error { k.Writes = writes; return nil }),
				set("verify", func() error { k.Verify = verify; return nil }),
				set("cluster", func() error { k.Cluster = cluster; return nil }),
				set("log-level", func() error { cfg.Log.Level = logLevel; return nil }),
				set("log-format", func() error { cfg.Log.Format = logFormat; return nil }),
			} {
				if err != nil {
					return err
				}
			}
			if err := af.apply(cmd, &cfg.Auth, &k.TLS); err != nil {
				return err
			}
			fc := &k.Federation
			if err := ff.apply(cmd, &fc.Join, &fc.Advertise, &fc.ID, &fc.Labels, &fc.Priority, &fc.Token); err != nil {
				return err
			}
			if err := rf.apply(cmd, &cfg.Records); err != nil {
				return err
			}
			mf.apply(cmd, &cfg.Monitoring)
			if err := cfg.ValidateCache(); err != nil {
				return usageError{err}
			}
			app.Version = Version
			log := app.NewLogger(cfg.Log, cmd.ErrOrStderr())
			c, err := app.NewCache(cfg, log, prometheus.NewRegistry())
			if err != nil {
				return err
			}
			defer c.Close()
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "wanda cache: the configuration is valid (listen %s); --check: not serving\n", k.Listen)
				return nil
			}
			ln, err := app.Listen(k.Listen)
			if err != nil {
				return err
			}
			return c.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgFile, "config", "", "YAML configuration file (see docs/config.md)")
	f.BoolVar(&check, "check", false, "load and check the configuration (exports, certificates, keys, policy) and exit without serving")
	f.StringVar(&listen, "listen", config.DefaultCache().Listen, "address to serve HTTP(S) on")
	f.StringVar(&upstream, "upstream", "", "the server or redirector to read from (http(s)://host:port)")
	f.StringVar(&dir, "dir", "", "directory for cached blocks (kept across restarts)")
	f.StringVar(&upToken, "upstream-token", "", "bearer token file the cache reads its upstream with (re-read when it changes)")
	f.StringVar(&maxSize, "max-size", "10GiB", "most bytes cached")
	f.StringVar(&blockSize, "block-size", "1MiB", "caching block size (a power of two, 4KiB-64MiB)")
	f.StringVar(&ram, "ram", "256MiB", "memory budget of upstream fetches in flight (like XCache's pfc.ram); a fetch over it waits")
	f.IntVar(&prefetch, "prefetch", config.DefaultCache().Prefetch, "blocks fetched ahead of a sequential reader")
	f.IntVar(&streams, "streams", config.DefaultCache().Streams, "parallel upstream requests for one large read")
	f.StringVar(&writes, "writes", "refuse", "refuse or passthrough")
	f.StringVar(&verify, "verify", "once", "block checksums: once (after loading from disk) or always")
	f.StringVar(&cluster, "cluster", "", "a redirector (one of --join) whose caches form one cache with this one: readers of a file another member owns are sent there (docs/cache.md, A cache cluster)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	ff.add(cmd)
	af.add(cmd)
	rf.add(cmd)
	mf.add(cmd)
	cmd.AddCommand(newCacheStatsCmd())
	return cmd
}

func newCacheStatsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats URL",
		Short: "Show a cache's contents and hit ratio",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, _, err := baseAndPath(args[0])
			if err != nil {
				return err
			}
			var s cache.Stats
			if err := fedCall(context.Background(), http.MethodGet, base+"/api/v1/cache/stats", "", nil, &s); err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, s)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
			row("upstream", s.Upstream)
			row("dir", s.Dir)
			row("files", fmt.Sprintf("%d (%d open)", s.Files, s.OpenFiles))
			row("used", fmt.Sprintf("%s of %s (%.1f%%)", fmtBytes(s.UsedBytes), fmtBytes(s.MaxBytes), 100*float64(s.UsedBytes)/float64(max(1, s.MaxBytes))))
			row("block size", fmtBytes(s.BlockSize))
			row("requests", fmt.Sprintf("%.0f hits, %.0f misses (hit ratio %.1f%%)", s.HitRequests, s.MissRequests, 100*s.HitRatio))
			row("bytes", fmt.Sprintf("%s from disk, %s from upstream (byte hit ratio %.1f%%)", fmtBytes(int64(s.DiskBytes)), fmtBytes(int64(s.UpstreamBytes)), 100*s.ByteHitRatio))
			row("fetched", fmtBytes(int64(s.FetchedBytes)))
			row("prefetch", fmt.Sprintf("%.0f blocks used", s.PrefetchUsed))
			row("ram", fmt.Sprintf("%s in use of %s (at most %s), %s of buffers, %d waits (%.1f s)", fmtBytes(s.RAM.InUse), fmtBytes(s.RAM.Bytes), fmtBytes(s.RAM.HighWater), fmtBytes(s.RAM.Buffers), s.RAM.Waits, s.RAM.WaitSeconds))
			row("evicted", fmt.Sprintf("%.0f files, %s", s.EvictedFiles, fmtBytes(int64(s.EvictedBytes))))
			row("invalidated", fmt.Sprintf("%.0f files (changed upstream)", s.Invalidated))
			row("corrupt blocks", fmt.Sprintf("%.0f (fetched again)", s.CorruptBlocks))
			row("stale served", fmt.Sprintf("%.0f opens", s.StaleServed))
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the stats as JSON")
	return cmd
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/mount"
)

func newMountCmd() *cobra.Command {
	var (
		cf                   clientFlags
		cacheDir             string
		cacheSize, blockSize string
		prefetch             int
		readOnly, debug      bool
		passthrough          bool
		attrTTL, negTTL      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "mount URL DIR [--cache-dir D] [--cache-size S] [--read-only] [--token FILE]",
		Short: "Mount a server, redirector or cache as a directory (FUSE); Ctrl-C unmounts",
		Long: `Mount any URL wanda reads (http(s):// or root://; a server, a redirector
or a cache) at DIR, in the foreground, until SIGINT or SIGTERM (or an
unmount from outside: fusermount3 -u DIR).

Reads go through a local block cache (--cache-dir, --cache-size) with
read-ahead for sequential readers and the engine's parallel streams,
retries and failover to replicas; when no server answers, a read fails
with EIO after --stall-timeout (twice) and the mount stays up.

Writes are staged locally and uploaded whole when the file is closed: the
file appears on the server complete or not at all, and close() returns the
upload's error. Opening an existing file for writing rewrites it whole.
mv, rm, mkdir and rmdir act on the server at once (docs/mount.md).

The token file is re-read when it changes: renew it without remounting.`,
		Example: `  wanda mount http://site:1094/store /mnt/store --read-only
  wanda mount root://redirector:1094//store /mnt/fed --cache-dir /scratch/wanda --cache-size 50GiB
  wanda mount https://site/scratch/me ~/scratch --token $XDG_RUNTIME_DIR/bt_u$(id -u)`,
		Args: nArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cs, bs config.Size
			if err := cs.UnmarshalText([]byte(cacheSize)); err != nil {
				return usagef("--cache-size: %v", err)
			}
			if err := bs.UnmarshalText([]byte(blockSize)); err != nil {
				return usagef("--block-size: %v", err)
			}
			if prefetch < 0 || attrTTL < 0 || negTTL < 0 {
				return usagef("--prefetch, --attr-ttl and --negative-ttl must not be negative")
			}
			c, err := cf.client(cmd.ErrOrStderr(), args[0])
			if err != nil {
				return err
			}
			m, err := mount.New(mount.Options{
				URL: args[0], Dir: args[1], Client: c,
				CacheDir: cacheDir, CacheSize: int64(cs), BlockSize: int64(bs), Prefetch: prefetch,
				ReadOnly: readOnly, NoPassthrough: !passthrough, AttrTTL: attrTTL, NegativeTTL: negTTL, Stall: cf.stall,
				Log: c.Log, Debug: debug,
			})
			if err != nil {
				return cf.explain(err)
			}
			c.Log.Info("mounted", "dir", args[1], "passthrough", m.Passthrough())
			fmt.Fprintf(cmd.ErrOrStderr(), "wanda: mounted at %s; Ctrl-C or fusermount3 -u %s to unmount\n", args[1], args[1])
			done := make(chan struct{})
			go func() { m.Wait(); close(done) }()
			select {
			case <-cmd.Context().Done():
			case <-done:
			}
			if err := m.Close(); err != nil {
				return fmt.Errorf("unmount %s: %w", args[1], err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wanda: unmounted %s\n", args[1])
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cacheDir, "cache-dir", "", "directory of the block cache and of staged writes (default: a temporary directory, removed at exit)")
	f.StringVar(&cacheSize, "cache-size", "10GiB", "most bytes the block cache keeps on disk")
	f.StringVar(&blockSize, "block-size", "1MiB", "the block cache's unit of fetch (a power of two, 4KiB-64MiB)")
	f.IntVar(&prefetch, "prefetch", mount.DefaultPrefetch, "most blocks fetched ahead of a sequential reader (the read-ahead window grows to it)")
	f.BoolVar(&passthrough, "passthrough", true, "open files the block cache holds whole in FUSE passthrough: the kernel reads the cached copy directly (Linux 6.9+, as root; otherwise off)")
	f.BoolVar(&readOnly, "read-only", false, "refuse every change (EROFS)")
	f.DurationVar(&attrTTL, "attr-ttl", mount.DefaultAttrTTL, "how long attributes and directory entries are kept before asking the server again")
	f.DurationVar(&negTTL, "negative-ttl", mount.DefaultNegativeTTL, "how long \"no such file\" is kept")
	f.BoolVar(&debug, "debug-fuse", false, "log every FUSE request to stderr")
	cf.add(cmd)
	// A mount waits less for a dead server than a copy does.
	if fl := cmd.Flags().Lookup("stall-timeout"); fl != nil {
		_ = fl.Value.Set(mount.DefaultStall.String())
		fl.DefValue = mount.DefaultStall.String()
	}
	return cmd
}

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/wan"
)

func newDemoCmd() *cobra.Command {
	var dir, listen string
	var exit, verbose bool
	cmd := &cobra.Command{
		Use:   "demo [--dir DIR] [--listen HOST:PORT] [--exit]",
		Short: "Generate sample data, serve it on loopback and show the client verbs and a federation",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if dir == "" {
				d, err := os.MkdirTemp("", "wanda-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			store, scratch := filepath.Join(dir, "store"), filepath.Join(dir, "scratch")
			fmt.Fprintf(out, "== generating sample data in %s\n", store)
			files, err := demo.Generate(store)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(scratch, 0o755); err != nil {
				return err
			}
			fmt.Fprintf(out, "   %d files, including %s (TTree \"events\", %d entries)\n", len(files), demo.RootPath, demo.RootEntries)

			cfg := config.Default()
			cfg.Server.Listen = listen
			cfg.Server.Exports = []config.Export{
				{Prefix: "/store", Path: store, ReadOnly: true},
				{Prefix: "/scratch", Path: scratch},
			}
			var logw io.Writer = io.Discard
			if verbose {
				logw = cmd.ErrOrStderr()
			}
			srv, err := app.NewServer(cfg, app.NewLogger(cfg.Log, logw), prometheus.NewRegistry())
			if err != nil {
				return err
			}
			defer srv.Close()
			ln, err := app.Listen(listen)
			if err != nil {
				return err
			}
			base := "http://" + ln.Addr().String()
			ctx := cmd.Context()
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, ln) }()

			fmt.Fprintf(out, "== wanda server on %s\n   /store   -> %s (read-only)\n   /scratch -> %s (writable)\n   metrics: %s/metrics\n\n", base, store, scratch, base)
			local := filepath.Join(dir, "downloaded.bin")
			steps := [][]string{
				{"ls", "-l", base + "/store/"},
				{"stat", base + "/store/" + demo.RootPath},
				{"sum", "--alg", "adler32", base + "/store/data/file-64m.bin"},
				{"cat", base + "/store/hello.txt"},
				{"cat", "--range", "0-9", base + "/store/hello.txt"},
				{"get", base + "/store/data/file-64m.bin", local},
				{"put", local, base + "/scratch/uploads/copy.bin"},
				{"sum", "--alg", "adler32", base + "/scratch/uploads/copy.bin"},
				{"mkdir", "-p", base + "/scratch/a/b"},
				{"ls", "-l", base + "/scratch/"},
				{"rm", base + "/scratch/uploads/copy.bin"},
				{"cp", "-r", "--parallel", "16", base + "/store/", base + "/scratch/mirror/"},
				{"cp", "-r", base + "/scratch/mirror/", filepath.Join(dir, "mirror")},
				// The same port speaks XRootD's root:// (docs/xrootd.md).
				{"cp", "--streams", "4", "root://" + ln.Addr().String() + "//store/data/file-64m.bin", filepath.Join(dir, "via-root.bin")},
				{"ls", "-l", "root://" + ln.Addr().String() + "//store/"},
			}
			if err := runSteps(ctx, out, steps); err != nil {
				return err
			}

			// The same server behind an emulated long fat path: one
			// stream is capped at window/RTT, parallel streams are not.
			wcfg := wan.Default()
			wcfg.RTT, wcfg.Rate, wcfg.Window = 100*time.Millisecond, 1e9, 4<<20
			relay, waddr, err := wan.Start(ctx, wcfg, "", ln.Addr().String())
			if err != nil {
				return err
			}
			defer relay.Close()
			far := "http://" + waddr
			fmt.Fprintf(out, "== wanda wan on %s -> %s: RTT 100 ms, 1 Gbit/s, window 4 MiB (one stream: at most 4 MiB / 100 ms = 42 MB/s; the link: 125 MB/s)\n\n", far, ln.Addr())
			if err := runSteps(ctx, out, [][]string{
				{"cp", "--streams", "1", far + "/store/data/file-64m.bin", filepath.Join(dir, "far-1.bin")},
				{"cp", "--streams", "8", far + "/store/data/file-64m.bin", filepath.Join(dir, "far-8.bin")},
			}); err != nil {
				return err
			}
			if err := runCacheDemo(ctx, out, logw, dir, far); err != nil {
				return err
			}
			if err := runFedDemo(ctx, out, logw, dir); err != nil {
				return err
			}
			if err := runAuthDemo(ctx, out, logw, dir); err != nil {
				return err
			}
			fmt.Fprintf(out, "Try it yourself:\n  curl -H 'Range: bytes=0-99,1000-1099' %s/store/data/file-1m.bin\n  python3 -c \"import uproot; print(uproot.open('%s/store/%s')['events'].arrays())\"\n  xrdcp root://%s//store/data/file-1m.bin /tmp/\n", base, base, demo.RootPath, ln.Addr())
			if exit {
				return nil
			}
			fmt.Fprintln(out, "\nServing until Ctrl-C.")
			return <-done
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "where to generate the data (default: a temporary directory, removed at exit)")
	f.StringVar(&listen, "listen", "127.0.0.1:0", "address to serve on")
	f.BoolVar(&exit, "exit", false, "exit after the walkthrough instead of serving")
	f.BoolVarP(&verbose, "verbose", "v", false, "show the server's access log")
	return cmd
}

// runSteps runs CLI verbs, echoing each command line.
func runSteps(ctx context.Context, out io.Writer, steps [][]string) error {
	for _, s := range steps {
		fmt.Fprintf(out, "$ wanda %s\n", join(s))
		if code := Run(ctx, s, out, out); code != 0 {
			return fmt.Errorf("demo step %q failed (exit %d)", join(s), code)
		}
		fmt.Fprintln(out)
	}
	return nil
}

func join(s []string) string {
	out := ""
	for i, a := range s {
		if i > 0 {
			out += " "
		}
		out += a
	}
	return out
}

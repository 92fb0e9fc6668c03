package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/client"
)

// clientFlags are the engine settings every transferring verb takes.
type clientFlags struct {
	credFlags
	retries int
	stall   time.Duration
	verbose bool
}

func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.retries, "retries", client.DefaultPolicy.Attempts-1, "retries per request after the first try (progress resets the count)")
	cmd.Flags().DurationVar(&f.stall, "stall-timeout", client.DefaultPolicy.Stall, "abort and retry a request that moves no byte for this long")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "log retries, redirects and fallbacks to stderr")
	f.credFlags.add(cmd)
}

// client builds the engine; urls are the ones the user named (their hosts
// may get the token over plain http).
func (f *clientFlags) client(stderr io.Writer, urls ...string) (*client.Client, error) {
	if f.retries < 0 {
		return nil, usagef("--retries must be >= 0")
	}
	if f.stall <= 0 {
		return nil, usagef("--stall-timeout must be positive")
	}
	c := client.New()
	c.Policy.Attempts = f.retries + 1
	c.Policy.Stall = f.stall
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelDebug
	}
	c.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c.HTTP.Log = c.Log
	// root://, roots:// (logging with c.Log), and the credentials.
	if err := f.credFlags.apply(c, urls...); err != nil {
		return nil, err
	}
	return c, nil
}

type cpFlags struct {
	clientFlags
	opts          client.CopyOptions
	quiet, asJSON bool
}

func newCpCmd() *cobra.Command {
	var f cpFlags
	cmd := &cobra.Command{
		Use:   "cp SRC... DST",
		Short: "Copy files and directories between local paths and URLs (parallel streams, retries, checksums)",
		Long: `Copy files between local paths and http(s):// URLs in any direction.

Large files move with parallel range streams on separate connections; many
files move in parallel over kept-alive connections. Failed requests are
retried with backoff (honouring Retry-After) and fail over to the replicas a
server or redirector advertised. Downloads land in a hidden part file and are
renamed into place only when complete and checksum-verified; --continue
resumes an interrupted copy.`,
		Example: `  wanda cp http://site/store/file.root .
  wanda cp --streams 8 http://site/store/big.root /data/
  wanda cp -r --parallel 32 http://site/store/run1/ ./run1
  wanda cp -r ./results http://site/scratch/user/`,
		Args: nArgs(2, 1<<20),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCopy(cmd, &f, args[:len(args)-1], args[len(args)-1])
		},
	}
	addCopyFlags(cmd, &f, true)
	return cmd
}

func addCopyFlags(cmd *cobra.Command, f *cpFlags, dirs bool) {
	f.clientFlags.add(cmd)
	fl := cmd.Flags()
	if dirs {
		fl.BoolVarP(&f.opts.Recursive, "recursive", "r", false, "copy directories and everything below")
		fl.IntVarP(&f.opts.Parallel, "parallel", "P", 8, "files in flight at once")
	}
	fl.IntVarP(&f.opts.Streams, "streams", "S", 0, "parallel range streams per file (0: from the file size: 1 below 8 MiB, 4 below 64 MiB, else 8)")
	fl.StringVar(&f.opts.Checksum, "checksum", "auto", "end-to-end checksum: adler32, crc32c, md5, sha-256 (the server must offer it), auto (verify when offered) or none")
	fl.BoolVarP(&f.opts.Continue, "continue", "c", false, "resume partial destinations (verified against the source)")
	fl.BoolVar(&f.opts.NoReplace, "no-replace", false, "fail files whose destination exists")
	fl.StringVar(&f.opts.TPC, "tpc", "auto", "remote-to-remote copies: pull (the destination fetches), push (the source sends), never (through this host), or auto (pull, then push, then through this host)")
	fl.BoolVar(&f.opts.Sync, "fsync", false, "fsync local destinations before renaming them into place (durable across power loss)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bars and no summary")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON document with per-file results")
}

func runCopy(cmd *cobra.Command, f *cpFlags, srcs []string, dst string) error {
	if f.opts.Streams < 0 || f.opts.Parallel < 0 {
		return usagef("--streams and --parallel must be >= 0")
	}
	if err := client.CheckChecksum(f.opts.Checksum); err != nil {
		return usageError{err}
	}
	switch f.opts.TPC {
	case client.TPCAuto, client.TPCPull, client.TPCPush, client.TPCNever:
	default:
		return usagef("--tpc %q: want auto, pull, push or never", f.opts.TPC)
	}
	c, err := f.client(cmd.ErrOrStderr(), append(append([]string(nil), srcs...), dst)...)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	var bars *barSet
	if !f.quiet && !f.asJSON && isTerminal(out) {
		bars = newBarSet(out)
		f.opts.Progress = bars
	}
	start := time.Now()
	results, cerr := c.Copy(cmd.Context(), srcs, dst, f.opts)
	c.HTTP.Client.CloseIdleConnections()
	if bars != nil {
		bars.wait()
	}
	elapsed := time.Since(start)
	var bytes int64
	retries, failed := 0, 0
	for _, r := range results {
		bytes += r.Bytes - r.Resumed
		retries += r.Retries
		if r.Error != "" {
			failed++
		}
	}
	switch {
	case f.asJSON:
		doc := struct {
			Files   []client.Result `json:"files"`
			Bytes   int64           `json:"bytes"`
			Seconds float64         `json:"seconds"`
			MBps    float64         `json:"mb_per_s"`
			Retries int             `json:"retries"`
			Failed  int             `json:"failed"`
			Error   string          `json:"error,omitempty"`
		}{Files: results, Bytes: bytes, Seconds: elapsed.Seconds(), MBps: float64(bytes) / 1e6 / max(elapsed.Seconds(), 1e-9), Retries: retries, Failed: failed}
		if doc.Files == nil {
			doc.Files = []client.Result{}
		}
		if cerr != nil {
			doc.Error = f.explain(cerr).Error()
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
	case !f.quiet:
		if bars == nil && len(results) == 1 && results[0].Error == "" {
			r := results[0]
			fmt.Fprintf(out, "%s -> %s: %s in %s (%s)%s\n", r.Src, r.Dst, human(r.Bytes), time.Duration(r.Seconds*float64(time.Second)).Round(time.Millisecond), rate(r.Bytes-r.Resumed, time.Duration(r.Seconds*float64(time.Second))), sumNote(r))
		} else if len(results) > 1 || (len(results) == 1 && results[0].Error == "") {
			// (One file that failed says why on stderr, and nothing more.)
			fmt.Fprintf(out, "%d files, %s in %s (%s), %d retries, %d failed\n", len(results), human(bytes), elapsed.Round(time.Millisecond), rate(bytes, elapsed), retries, failed)
		}
	}
	return f.explain(cerr)
}

func sumNote(r client.Result) string {
	mode := ""
	switch r.Mode {
	case client.TPCPull, client.TPCPush:
		mode = ", third-party copy (" + r.Mode + ")"
	}
	return mode + verifiedNote(r)
}

func verifiedNote(r client.Result) string {
	switch {
	case r.Verified && r.Checksum != "":
		return ", " + r.Checksum + " verified"
	case r.Checksum != "" && strings.HasPrefix(r.Dst, "s3://"):
		// S3 checks no such digest: it is stored as metadata, and each
		// part's Content-MD5 was checked (docs/s3.md).
		return ", " + r.Checksum + " stored with the object (S3 checked every part's MD5)"
	case r.Checksum != "":
		return ", " + r.Checksum + " sent for the server to check"
	}
	return ""
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

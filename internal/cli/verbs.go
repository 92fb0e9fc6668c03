package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/client"
)

// remoteURL checks that a verb's argument is an http(s) URL.
func remoteURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "root" && u.Scheme != "roots" && u.Scheme != "s3") || u.Host == "" {
		return "", usagef("%q is not an http(s)://, root(s):// or s3:// URL", s)
	}
	return s, nil
}

// newClient is the client engine with every transport wanda has (HTTP(S),
// root:// and s3://) and the credentials of f; urls are the ones the user named
// (their hosts may get the token over plain http). Warnings go to stderr.
func newClient(stderr io.Writer, f *credFlags, urls ...string) (*client.Client, error) {
	c := client.New()
	c.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c.HTTP.Log = c.Log
	if err := f.apply(c, urls...); err != nil {
		return nil, err
	}
	return c, nil
}

func newGetCmd() *cobra.Command {
	var f cpFlags
	cmd := &cobra.Command{
		Use:   "get URL [DEST]",
		Short: "Download a file (checksum-verified, atomic; cp for one file)",
		Args:  nArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := remoteURL(args[0]); err != nil {
				return err
			}
			dest := "."
			if len(args) == 2 {
				dest = args[1]
			}
			return runCopy(cmd, &f, args[:1], dest)
		},
	}
	addCopyFlags(cmd, &f, false)
	return cmd
}

func newPutCmd() *cobra.Command {
	var f cpFlags
	cmd := &cobra.Command{
		Use:   "put SRC URL",
		Short: "Upload a file (checksum verified by the server, atomic; cp for one file)",
		Args:  nArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := remoteURL(args[1]); err != nil {
				return err
			}
			return runCopy(cmd, &f, args[:1], args[1])
		},
	}
	addCopyFlags(cmd, &f, false)
	return cmd
}

func newLsCmd() *cobra.Command {
	var long, asJSON bool
	var cf credFlags
	cmd := &cobra.Command{
		Use:   "ls URL",
		Short: "List a directory",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := remoteURL(args[0])
			if err != nil {
				return err
			}
			c, err := newClient(cmd.ErrOrStderr(), &cf, u)
			if err != nil {
				return err
			}
			infos, err := c.List(cmd.Context(), u)
			if err != nil {
				return cf.explain(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(infos)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
			for _, in := range infos {
				name := in.Name
				if in.IsDir {
					name += "/"
				}
				if long {
					kind := "-"
					if in.IsDir {
						kind = "d"
					}
					fmt.Fprintf(tw, "%s\t%s\t %s\t %s\t\n", kind, sizeText(in.Size), in.ModTime.UTC().Format("2006-01-02 15:04:05"), name)
				} else {
					fmt.Fprintln(out, name)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVarP(&long, "long", "l", false, "show type, size and modification time")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cf.add(cmd)
	return cmd
}

func newStatCmd() *cobra.Command {
	var asJSON bool
	var cf credFlags
	cmd := &cobra.Command{
		Use:   "stat URL",
		Short: "Show size, type and modification time",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := remoteURL(args[0])
			if err != nil {
				return err
			}
			c, err := newClient(cmd.ErrOrStderr(), &cf, u)
			if err != nil {
				return err
			}
			in, err := c.Stat(cmd.Context(), u)
			if err != nil {
				return cf.explain(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(in)
			}
			kind := "file"
			if in.IsDir {
				kind = "directory"
			}
			size := "unknown (the server did not say)"
			if in.Size >= 0 {
				size = fmt.Sprintf("%d (%s)", in.Size, human(in.Size))
			}
			fmt.Fprintf(out, "url:      %s\ntype:     %s\nsize:     %s\nmodified: %s\n", in.URL, kind, size, in.ModTime.UTC().Format(time.RFC3339))
			if in.ChecksumProp != "" {
				fmt.Fprintf(out, "checksum: %s\n", in.ChecksumProp)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cf.add(cmd)
	return cmd
}

func newRmCmd() *cobra.Command {
	var recursive bool
	var cf credFlags
	cmd := &cobra.Command{
		Use:   "rm URL...",
		Short: "Remove files (and directories with -r)",
		Args:  nArgs(1, 1<<20),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd.ErrOrStderr(), &cf, args...)
			if err != nil {
				return err
			}
			for _, a := range args {
				u, err := remoteURL(a)
				if err != nil {
					return err
				}
				if err := c.Remove(cmd.Context(), u, recursive); err != nil {
					return cf.explain(err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	cf.add(cmd)
	return cmd
}

func newMkdirCmd() *cobra.Command {
	var parents bool
	var cf credFlags
	cmd := &cobra.Command{
		Use:   "mkdir URL...",
		Short: "Create directories",
		Args:  nArgs(1, 1<<20),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd.ErrOrStderr(), &cf, args...)
			if err != nil {
				return err
			}
			for _, a := range args {
				u, err := remoteURL(a)
				if err != nil {
					return err
				}
				if err := c.Mkdir(cmd.Context(), u, parents); err != nil {
					return cf.explain(err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create parents as needed; no error if it exists")
	cf.add(cmd)
	return cmd
}

func newCatCmd() *cobra.Command {
	var byteRange string
	var cf credFlags
	cmd := &cobra.Command{
		Use:   "cat URL [--range a-b]",
		Short: "Write a file, or a byte range of it, to stdout",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := remoteURL(args[0])
			if err != nil {
				return err
			}
			if byteRange != "" && !validRange(byteRange) {
				return usagef("--range %q: want a-b, a- or -n (bytes, inclusive)", byteRange)
			}
			c, err := newClient(cmd.ErrOrStderr(), &cf, u)
			if err != nil {
				return err
			}
			_, err = c.Get(cmd.Context(), u, cmd.OutOrStdout(), byteRange)
			return cf.explain(err)
		},
	}
	cmd.Flags().StringVar(&byteRange, "range", "", "byte range a-b (inclusive), a- or -n")
	cf.add(cmd)
	return cmd
}

func validRange(s string) bool {
	a, b, ok := strings.Cut(s, "-")
	if !ok || (a == "" && b == "") || strings.Contains(b, "-") {
		return false
	}
	for _, c := range a + b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func newSumCmd() *cobra.Command {
	var alg string
	var cf credFlags
	cmd := &cobra.Command{
		Use:   "sum URL --alg adler32|crc32c|md5|sha256",
		Short: "Print the server's checksum of a file",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := remoteURL(args[0])
			if err != nil {
				return err
			}
			if checksum.Canonical(alg) == "" {
				return usagef("--alg %q: known algorithms are %s", alg, strings.Join(checksum.Names, ", "))
			}
			c, err := newClient(cmd.ErrOrStderr(), &cf, u)
			if err != nil {
				return err
			}
			sum, err := c.Checksum(cmd.Context(), u, alg)
			if err != nil {
				return cf.explain(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s\n", checksum.Canonical(alg), checksum.Hex(sum), u)
			return nil
		},
	}
	cmd.Flags().StringVar(&alg, "alg", "adler32", "checksum algorithm")
	cf.add(cmd)
	return cmd
}

// sizeText is a listing's size column: "?" when the server gave none.
func sizeText(n int64) string {
	if n < 0 {
		return "?"
	}
	return strconv.FormatInt(n, 10)
}

// human prints a byte count in binary units.
func human(n int64) string { return client.FormatBytes(n) }

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MB/s", float64(n)/d.Seconds()/1e6)
}

package dist

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// writeManPages writes a gzipped man page (section 1) for every command of
// the tree into dir, dated by the commit, and returns their names.
func writeManPages(root *cobra.Command, version string, date time.Time, dir string) ([]string, error) {
	raw := filepath.Join(dir, "raw")
	if err := os.MkdirAll(raw, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(raw)
	root.DisableAutoGenTag = true // no "generated on" line: the date is in the header
	hdr := &doc.GenManHeader{Title: "WANDA", Section: "1", Date: &date, Source: "wanda " + version, Manual: "wanda manual"}
	if err := doc.GenManTree(root, hdr, raw); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(raw)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(raw, e.Name()))
		if err != nil {
			return nil, err
		}
		gz, err := gzipBytes(b, gzip.BestCompression)
		if err != nil {
			return nil, err
		}
		name := e.Name() + ".gz"
		if err := os.WriteFile(filepath.Join(dir, name), gz, 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// writeCompletions writes bash, zsh and fish completions for the tree
// into dir, as `wanda completion SHELL` prints them.
func writeCompletions(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, gen := range map[string]func(*bytes.Buffer) error{
		"wanda.bash": func(b *bytes.Buffer) error { return root.GenBashCompletionV2(b, true) },
		"_wanda":     func(b *bytes.Buffer) error { return root.GenZshCompletion(b) },
		"wanda.fish": func(b *bytes.Buffer) error { return root.GenFishCompletion(b, true) },
	} {
		var b bytes.Buffer
		if err := gen(&b); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gzipBytes compresses b with no name and no time in the header, so that
// the same input always gives the same bytes.
func gzipBytes(b []byte, level int) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, level)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// Stat describes the file or directory at rawURL, with the checksums the
// server keeps (adler32 asked for: WebDAV servers may list more).
func (c *Client) Stat(ctx context.Context, rawURL string) (Info, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Info{}, err
	}
	return c.stat(ctx, u, []string{checksum.Adler32}, true)
}

// StatNoSums is Stat without asking for checksums: what a filesystem's
// getattr needs, at the price of a listing entry (a server may have to
// read a whole file to checksum it).
func (c *Client) StatNoSums(ctx context.Context, rawURL string) (Info, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Info{}, err
	}
	return c.stat(ctx, u, nil, true)
}

func (c *Client) stat(ctx context.Context, u *url.URL, want []string, dir bool) (Info, error) {
	var in Info
	err := c.run(ctx, u, call{
		op: func(ctx context.Context, t Transport, target *url.URL) error {
			var err error
			in, err = t.Stat(ctx, target, want, dir)
			return err
		},
		learned: func() []*url.URL { return in.Alternates },
	})
	return in, err
}

// List returns the entries of the directory at rawURL (or the file itself).
func (c *Client) List(ctx context.Context, rawURL string) ([]Info, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return c.list(ctx, u)
}

func (c *Client) list(ctx context.Context, u *url.URL) ([]Info, error) {
	var out []Info
	err := c.run(ctx, u, call{op: func(ctx context.Context, t Transport, target *url.URL) error {
		var err error
		out, err = t.List(ctx, target)
		return err
	}})
	return out, err
}

// Remove deletes rawURL. A directory needs recursive, so that `rm` of a
// directory by mistake does not delete a tree.
func (c *Client) Remove(ctx context.Context, rawURL string, recursive bool) error {
	u, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	if !recursive {
		in, err := c.stat(ctx, u, nil, true)
		if err != nil {
			return err
		}
		if in.IsDir {
			return fmt.Errorf("%s is a directory (use -r to remove it and everything below)", rawURL)
		}
	}
	return c.run(ctx, u, call{write: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
		return t.Remove(ctx, target)
	}})
}

// Mkdir creates the directory rawURL; with parents, missing parents too,
// and an existing directory is not an error.
func (c *Client) Mkdir(ctx context.Context, rawURL string, parents bool) error {
	u, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	if !parents {
		return c.mkdir(ctx, u)
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	for i := range segs {
		step := *u
		step.Path = "/" + strings.Join(segs[:i+1], "/")
		step.RawPath = ""
		if err := c.mkdir(ctx, &step); err != nil && !errors.Is(err, ErrExist) {
			return err
		}
	}
	return nil
}

func (c *Client) mkdir(ctx context.Context, u *url.URL) error {
	return c.run(ctx, u, call{write: true, op: func(ctx context.Context, t Transport, target *url.URL) error {
		return t.Mkdir(ctx, target)
	}})
}

// Checksum asks the server for rawURL's checksum.
func (c *Client) Checksum(ctx context.Context, rawURL, alg string) ([]byte, error) {
	canon := checksum.Canonical(alg)
	if canon == "" {
		return nil, fmt.Errorf("unknown checksum algorithm %q (known: %s)", alg, strings.Join(checksum.Names, ", "))
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var sum []byte
	err = c.run(ctx, u, call{op: func(ctx context.Context, t Transport, target *url.URL) error {
		var err error
		sum, err = t.Checksum(ctx, target, canon)
		return err
	}})
	return sum, err
}

package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Get writes rawURL (or its byte range "a-b", "a-" or "-n") to w, with the
// engine's retries and failover (a retry resumes where the last try
// stopped), and returns the byte count. The file's version is learned
// first (HEAD): a try that finds another version fails with
// ErrSourceChanged instead of splicing two versions into w.
func (c *Client) Get(ctx context.Context, rawURL string, w io.Writer, byteRange string) (int64, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return 0, err
	}
	in, err := c.stat(ctx, u, nil, false)
	expect := &in
	if errors.Is(err, errNoLength) && byteRange == "" {
		// No size to compare answers with: read to the end, unchecked.
		expect, err = nil, nil
	}
	if err != nil {
		return 0, err
	}
	off, n := int64(0), int64(-1)
	if byteRange != "" {
		off, n, err = parseByteRange(byteRange, in.Size)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, nil
		}
	}
	return c.fetch(ctx, u, off, n, nil, expect, func(b []byte, _ int64) error {
		_, err := w.Write(b)
		return err
	}, nil, nil)
}

// parseByteRange reads "a-b", "a-" or "-n" against a file of size bytes.
func parseByteRange(s string, size int64) (off, n int64, err error) {
	a, b, ok := strings.Cut(s, "-")
	bad := fmt.Errorf("bad range %q (want a-b, a- or -n)", s)
	if !ok {
		return 0, 0, bad
	}
	switch {
	case a == "":
		k, err := strconv.ParseInt(b, 10, 64)
		if err != nil || k < 0 {
			return 0, 0, bad
		}
		k = min(k, size)
		return size - k, k, nil
	case b == "":
		o, err := strconv.ParseInt(a, 10, 64)
		if err != nil || o < 0 {
			return 0, 0, bad
		}
		if o >= size {
			return 0, 0, fmt.Errorf("range %q starts past the end of the file (%d bytes)", s, size)
		}
		return o, size - o, nil
	}
	o, err1 := strconv.ParseInt(a, 10, 64)
	e, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || o < 0 || e < o {
		return 0, 0, bad
	}
	if o >= size {
		return 0, 0, fmt.Errorf("range %q starts past the end of the file (%d bytes)", s, size)
	}
	e = min(e, size-1)
	return o, e - o + 1, nil
}

package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"sync"

	"github.com/wanda-fed/wanda/internal/checksum"
)

// A download's end-to-end checksum: computed while the bytes arrive
// (inline for one stream from byte 0, else by a follower that hashes the
// contiguous prefix from the part file), compared with the server's. The
// server's is asked on a data request (Want-Digest on a single stream's
// GET, or on the first request while the stream count is not known yet),
// or beside the data by a request of its own (sumAsk) whose round trip
// the transfer hides — never before the first byte.

// sumPlan is what to compute locally and what to ask the server for.
type sumPlan struct {
	ask      []string // Want-Digest preference
	compute  []string // hashed while streaming
	required bool     // the user named the algorithm: no server answer is an error
}

// CheckChecksum validates a --checksum choice.
func CheckChecksum(choice string) error {
	_, err := planSums(choice)
	return err
}

func planSums(choice string) (sumPlan, error) {
	switch choice {
	case "", "none":
		return sumPlan{}, nil
	case "auto":
		// adler32 is what XRootD and dCache sites keep; crc32c and md5
		// are asked for as fallbacks and computed afterwards if needed.
		return sumPlan{ask: []string{checksum.Adler32, checksum.CRC32C, checksum.MD5}, compute: []string{checksum.Adler32}}, nil
	}
	alg := checksum.Canonical(choice)
	if alg == "" {
		return sumPlan{}, fmt.Errorf("unknown checksum %q (adler32, crc32c, md5, sha-256, auto or none)", choice)
	}
	return sumPlan{ask: []string{alg}, compute: []string{alg}, required: true}, nil
}

// sumAsk is the server's checksum asked by a request of its own (HEAD
// with Want-Digest; kXR_stat and kXR_query over root://), in the
// background.
type sumAsk struct {
	once sync.Once
	on   bool
	done chan struct{}
	sums map[string][]byte
	err  error
	st   opStats
}

func newSumAsk() *sumAsk { return &sumAsk{done: make(chan struct{})} }

// start asks, once; ctx ends the question.
func (a *sumAsk) start(ctx context.Context, c *Client, src *url.URL, ask []string) {
	a.once.Do(func() {
		a.on = true
		go func() {
			defer close(a.done)
			a.sums, a.err = c.serverSums(ctx, src, ask, &a.st)
		}()
	})
}

// wait waits for the answer of a question asked (at once when none was).
func (a *sumAsk) wait() {
	a.once.Do(func() { close(a.done) })
	<-a.done
}

// serverSums asks the server for its checksums (HEAD with Want-Digest).
func (c *Client) serverSums(ctx context.Context, src *url.URL, ask []string, st *opStats) (map[string][]byte, error) {
	var sums map[string][]byte
	err := c.run(ctx, src, call{stats: st, op: func(ctx context.Context, t Transport, target *url.URL) error {
		in, err := t.Stat(ctx, target, ask, false)
		sums = in.Sums
		return err
	}})
	return sums, err
}

// verify compares the part file's checksum with the server's: from an
// answer (got), else from the question asked beside the data, else asked
// now. keep reports a part worth keeping for --continue (the bytes may be
// right; only the server's checksum is missing).
func (t *transfer) verify(ctx context.Context, got map[string][]byte) (keep bool, err error) {
	plan, res := t.plan, t.res
	if len(plan.ask) == 0 {
		return false, nil
	}
	sums := got
	var askErr error
	if sums == nil {
		// Asked beside the data; or not yet: one stream whose GET
		// brought none, an empty file (no GET at all).
		t.asker.start(ctx, t.c, t.src, plan.ask)
		t.asker.wait()
		sums, askErr = t.asker.sums, t.asker.err
		res.Retries += t.asker.st.Retries
	}
	if sums == nil && askErr != nil && plan.required {
		return true, fmt.Errorf("asking %s for its %s checksum: %w", Redact(t.src), plan.ask[0], askErr)
	}
	alg, want := pickSum(sums, plan.ask)
	switch {
	case alg == "" && plan.required:
		return true, fmt.Errorf("%s: the server offers no %s checksum (use --checksum auto or none)", Redact(t.src), plan.ask[0])
	case alg == "":
		return false, nil
	}
	if _, ok := t.localSums()[alg]; t.device && !ok {
		// Written into a device: nothing to read back and hash.
		if plan.required {
			return false, fmt.Errorf("%s: the server offers %s, which cannot be computed of bytes written to a device", Redact(t.src), alg)
		}
		return false, nil
	}
	have, err := localSum(ctx, t.part, t.localSums(), alg)
	if err != nil {
		return false, err
	}
	if !bytes.Equal(have, want) {
		return false, &ChecksumError{Alg: alg, Want: want, Got: have, Whom: "server " + res.Server, What: "received bytes"}
	}
	res.Checksum = alg + ":" + checksum.Hex(have)
	res.Verified = true
	return false, nil
}

func pickSum(sums map[string][]byte, pref []string) (string, []byte) {
	for _, a := range pref {
		if s, ok := sums[a]; ok {
			return a, s
		}
	}
	return "", nil
}

// localSum returns alg over the part file: from the sums computed while
// the bytes arrived when they include it, else by reading the file again.
func localSum(ctx context.Context, f io.ReaderAt, have map[string][]byte, alg string) ([]byte, error) {
	if s, ok := have[alg]; ok {
		return s, nil
	}
	return checksum.Compute(ctx, alg, io.NewSectionReader(f, 0, 1<<62))
}

// hashPrefix feeds the part file's bytes to h in order as the schedule's
// contiguous done prefix grows, until it covers the file (or the transfer
// failed: its error is reported).
func hashPrefix(f io.ReaderAt, s *sched, h io.Writer) error {
	buf := getBuf()
	defer putBuf(buf)
	var at int64
	for {
		front, ok := s.waitFrontier(at)
		for at < front {
			n := min(int64(len(*buf)), front-at)
			m, err := f.ReadAt((*buf)[:n], at)
			if err != nil && !(err == io.EOF && int64(m) == n) {
				return err
			}
			h.Write((*buf)[:m])
			at += int64(m)
		}
		if !ok {
			return nil
		}
	}
}

package fed

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// digestRetry is how long a member waits before sending a digest again
// to a redirector that refused one (an older redirector answers 404).
const digestRetry = 5 * time.Minute

// digestLost marks a parent's copy of the digest as stale: notices it
// should have applied were lost.
func (j *Joiner) digestLost(p *parent) {
	if j.opts.Digest == nil {
		return
	}
	p.mu.Lock()
	p.digestStale = true
	p.mu.Unlock()
}

// digestCheck is how often a member looks whether its digest must go
// to a parent: a digest crosses a level within about this long (what a
// redirector sends is the union of what its members sent).
const digestCheck = time.Second

// digestLoop keeps a parent's copy of the member's digest current: it
// sends the digest when its generation changed or the parent's copy is
// stale, at most once per digestCheck, and withdraws it when the member
// can no longer vouch for its names.
func (j *Joiner) digestLoop(ctx context.Context, p *parent) {
	defer j.wg.Done()
	for {
		t := time.NewTimer(digestCheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		p.mu.Lock()
		joined, stale, sentGen, sent, after := p.st.Joined, p.digestStale, p.digestGen, p.digestSent, p.digestAfter
		p.mu.Unlock()
		if !joined || time.Now().Before(after) {
			continue
		}
		seq := j.Seq() // the digest read next includes every notice up to it
		dg, gen, ok := j.opts.Digest()
		if ok && gen == sentGen && sent && !stale {
			continue
		}
		if !ok && !sent && !stale {
			continue
		}
		err := j.sendDigest(ctx, p.url, dg, seq, ok)
		p.mu.Lock()
		switch {
		case err == nil:
			p.digestGen, p.digestSent, p.digestStale = gen, ok, false
		case isRefusal(err):
			p.digestAfter = time.Now().Add(digestRetry)
		}
		p.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			j.log.Debug("digest not delivered", "redirector", p.url, "entries", len(dg), "err", err)
		}
	}
}

// refusal is a redirector that does not take digests.
type refusal struct{ error }

func isRefusal(err error) bool { _, ok := err.(refusal); return ok }

// sendDigest PUTs the digest (ok) or DELETEs the parent's copy.
func (j *Joiner) sendDigest(ctx context.Context, base string, d Digest, seq uint64, ok bool) error {
	var self Member
	if j.opts.Self != nil {
		self = j.opts.Self()
	}
	q := url.Values{"id": {self.ID}, "instance": {self.Instance}, "seq": {strconv.FormatUint(seq, 10)}}
	method, body := http.MethodDelete, []byte(nil)
	if ok {
		method, body = http.MethodPut, d.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, base+DigestPath+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := j.do(req)
	if err != nil {
		return ShortErr(err)
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return nil
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return refusal{responseError(resp)}
	}
	return responseError(resp)
}

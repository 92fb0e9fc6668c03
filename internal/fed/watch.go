package fed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// WatchPath is the redirector's endpoint a member holds a request open
// to (GET WatchPath?id=ID&instance=INSTANCE, after a heartbeat): when the
// member's process ends, its connection closes and the redirector drops
// it at once instead of after the heartbeat miss limit (as cmsd's
// persistent connection to its manager does).
const WatchPath = "/api/v1/members/watch"

// watchRetry is how long a member waits before asking again a redirector
// that refused its watch (an older redirector answers 404).
const watchRetry = 30 * time.Second

// startWatch opens the persistent connection to p unless one is open or
// p refused one lately; p.mu is held. It closes when Stop has said the
// goodbyes (DELETE first: a member that leaves is not lost).
func (j *Joiner) startWatch(p *parent, id, inst string) {
	if p.watching || id == "" || inst == "" || time.Now().Before(p.watchAfter) || j.watchCtx.Err() != nil {
		return
	}
	p.watching = true
	j.watchWG.Add(1)
	go j.watch(j.watchCtx, p, id, inst)
}

// watch holds the connection until it ends; then a heartbeat goes out at
// once (a redirector that dropped the member learns it again).
func (j *Joiner) watch(ctx context.Context, p *parent, id, inst string) {
	defer j.watchWG.Done()
	held, refused, err := j.hold(ctx, p.url, id, inst)
	p.mu.Lock()
	p.watching = false
	if refused {
		// The redirector answered no (an older one, or it does not know
		// us yet): not again for a while. A connection that failed is
		// tried again with the next heartbeat.
		p.watchAfter = time.Now().Add(watchRetry)
	}
	p.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	j.log.Debug("persistent connection to the redirector ended", "redirector", p.url, "held", held, "err", err)
	if held {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// hold sends the watch request and reads its answer until the end; held
// reports whether the redirector took it, refused whether it answered no.
func (j *Joiner) hold(ctx context.Context, base, id, inst string) (held, refused bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		base+WatchPath+"?id="+url.QueryEscape(id)+"&instance="+url.QueryEscape(inst), nil)
	if err != nil {
		return false, true, err
	}
	if j.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+j.opts.Token)
	}
	resp, err := j.watchClient.Do(req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, true, fmt.Errorf("watch: %w", responseError(resp))
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if err == nil {
		err = errors.New("closed by the redirector")
	}
	return true, false, err
}

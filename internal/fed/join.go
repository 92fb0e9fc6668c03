package fed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is the heartbeat interval a Joiner starts with when
// JoinOptions.Interval is not set, until a redirector names its own.
const DefaultInterval = 5 * time.Second

// lostRetry is the first wait before asking again a redirector the
// member lost (it doubles up to the heartbeat interval).
const lostRetry = 250 * time.Millisecond

// Bounds of an interval adopted from a redirector's reply: a confused or
// hostile redirector can neither make its members spin nor fall silent.
const (
	MinInterval = 100 * time.Millisecond
	MaxInterval = 10 * time.Minute
)

// JoinOptions configure a Joiner.
type JoinOptions struct {
	// Parents are the redirectors' base URLs (http(s)://host:port).
	Parents []string
	// Interval is the heartbeat interval until a redirector's reply names
	// another (HeartbeatReply.IntervalMS > 0, clamped to [MinInterval,
	// MaxInterval]); DefaultInterval when zero.
	Interval time.Duration
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
	// Self describes the member; it is called before every heartbeat so
	// that load and exports are fresh. The Joiner sets Version, and
	// Drained from what each redirector last told it.
	Self func() Member
	// Digest, when set, is the member's digest of its names (digest.go):
	// gen changes whenever the digest may have; ok false when the member
	// cannot vouch for its names (the redirectors then ask it about every
	// name). It must include every notice numbered up to Seq() as read
	// before the call.
	Digest func() (d Digest, gen uint64, ok bool)
	// Client sends the requests; nil means a client of its own with a 5 s
	// total timeout per request.
	Client *http.Client
	Log    *slog.Logger
}

// ParentStatus is a Joiner's view of one redirector.
type ParentStatus struct {
	URL string `json:"url"`
	// Joined is true when the last heartbeat was answered with 200.
	Joined    bool      `json:"joined"`
	LastOK    time.Time `json:"last_ok,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// Drained and Removed are what the redirector last said about us.
	Drained bool `json:"drained,omitempty"`
	Removed bool `json:"removed,omitempty"`
	// Redirector is the redirector's ID from its last reply.
	Redirector string `json:"redirector,omitempty"`
	// Interval is the heartbeat interval in use.
	Interval time.Duration `json:"interval"`
}

// Joiner is the member side of membership: it keeps a member known to its
// redirectors with one heartbeat loop per redirector. Heartbeats are
// idempotent, so a restarted redirector learns the member again from the
// next one, without any action on either side.
type Joiner struct {
	opts   JoinOptions
	log    *slog.Logger
	client *http.Client
	// watchClient holds the persistent connections (watch.go): the
	// client's transport, no overall timeout.
	watchClient *http.Client
	ownTr       *http.Transport // closed at Stop when the client is ours
	parents     []*parent

	cancel context.CancelFunc
	wg     sync.WaitGroup
	// The persistent connections (watch.go) outlive the loops until the
	// goodbyes are said: a member that leaves is not reported lost.
	watchCtx    context.Context
	watchCancel context.CancelFunc
	watchWG     sync.WaitGroup
	stopOnce    sync.Once
	// seq numbers the file notices (events.go).
	seq atomic.Uint64
}

type parent struct {
	url  string
	kick chan struct{} // Beat: capacity 1, never blocks

	mu       sync.Mutex
	st       ParentStatus
	everOK   bool
	failing  bool   // the last attempt failed (its failure was logged)
	lastID   string // member ID of the last heartbeat, for DELETE
	interval time.Duration
	// watching: the persistent connection is open; watchAfter: not
	// before then (the redirector refused one).
	watching   bool
	watchAfter time.Time
	// events are file notices waiting to be sent (events.go); evKick
	// wakes the sender.
	events        []Event
	eventsDropped int
	evKick        chan struct{}
	// The digest this redirector holds (digest_join.go): the generation
	// sent, whether it must be sent again (it lost notices, restarted,
	// or said it holds none), when not before (it refused digests).
	digestGen   uint64
	digestSent  bool
	digestStale bool
	digestAfter time.Time
}

// StartJoiner starts one heartbeat loop per parent; each sends its first
// heartbeat at once. Stop ends them.
func StartJoiner(opts JoinOptions) *Joiner {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	j := &Joiner{opts: opts, log: opts.Log.With("component", "join"), client: opts.Client}
	if j.client == nil {
		j.ownTr = http.DefaultTransport.(*http.Transport).Clone()
		j.client = &http.Client{Transport: j.ownTr, Timeout: 5 * time.Second}
	}
	j.watchClient = &http.Client{Transport: j.client.Transport}
	ctx, cancel := context.WithCancel(context.Background())
	j.cancel = cancel
	j.watchCtx, j.watchCancel = context.WithCancel(context.Background())
	for _, u := range opts.Parents {
		p := &parent{url: BaseURL(u), kick: make(chan struct{}, 1), evKick: make(chan struct{}, 1), interval: opts.Interval}
		p.st = ParentStatus{URL: p.url, Interval: p.interval}
		j.parents = append(j.parents, p)
		j.wg.Add(2)
		go j.loop(ctx, p)
		go j.eventLoop(ctx, p)
		if opts.Digest != nil {
			j.wg.Add(1)
			go j.digestLoop(ctx, p)
		}
	}
	return j
}

// Beat asks every loop for a heartbeat now (after exports or a drain
// changed); it never blocks.
func (j *Joiner) Beat() {
	for _, p := range j.parents {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// Status reports each parent's state, in the order of JoinOptions.Parents.
func (j *Joiner) Status() []ParentStatus {
	out := make([]ParentStatus, len(j.parents))
	for i, p := range j.parents {
		p.mu.Lock()
		out[i] = p.st
		p.mu.Unlock()
	}
	return out
}

// Stop ends the heartbeat loops (aborting heartbeats in flight), then tells
// every parent the member leaves (DELETE, in parallel, best effort, bounded
// by ctx and the client's timeout), then closes the persistent
// connections, and returns when all that is done. Later calls return at
// once.
func (j *Joiner) Stop(ctx context.Context) {
	j.stopOnce.Do(func() {
		j.cancel()
		j.wg.Wait()
		var wg sync.WaitGroup
		for _, p := range j.parents {
			p.mu.Lock()
			removed, id := p.st.Removed, p.lastID
			p.mu.Unlock()
			if removed {
				continue
			}
			if id == "" && j.opts.Self != nil {
				id = j.opts.Self().ID
			}
			if id == "" {
				continue
			}
			wg.Go(func() {
				if err := j.leave(ctx, p.url, id); err != nil {
					j.log.Debug("leaving redirector", "redirector", p.url, "err", err)
				}
			})
		}
		wg.Wait()
		j.watchCancel()
		j.watchWG.Wait()
		if j.ownTr != nil {
			j.ownTr.CloseIdleConnections()
		}
	})
}

// Jitter spreads a period over ±10%: members that started together
// (a site booted, a redirector restarted and all rejoined at once) do not
// stay in step and send their heartbeats in one burst each period.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - d/10 + rand.N(d/5+1)
}

func (j *Joiner) loop(ctx context.Context, p *parent) {
	defer j.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop() // the first heartbeat goes out now
	defer t.Stop()
	// After losing a redirector it had joined, the member asks again
	// sooner than its interval (from 250 ms, doubling): a restarted
	// redirector has its members back within a second or so.
	retry := lostRetry
	for {
		if !j.beat(ctx, p) {
			return
		}
		p.mu.Lock()
		d := p.interval
		if p.failing && p.everOK {
			d, retry = min(retry, d), min(2*retry, d)
		} else {
			retry = lostRetry
		}
		p.mu.Unlock()
		t.Reset(Jitter(d))
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-t.C:
		}
	}
}

// beat sends one heartbeat and records the outcome. It returns false when
// the loop must end (stopped, or removed by an admin).
func (j *Joiner) beat(ctx context.Context, p *parent) bool {
	var m Member
	if j.opts.Self != nil {
		m = j.opts.Self()
	}
	m.Version = Version
	p.mu.Lock()
	m.Drained = p.st.Drained
	p.mu.Unlock()

	reply, err := j.send(ctx, p.url, &m)
	if ctx.Err() != nil {
		return false // stopping: an aborted heartbeat is no failure
	}
	log := j.log.With("redirector", p.url)
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.ID != "" {
		p.lastID = m.ID
	}
	if err != nil {
		p.st.Joined = false
		p.st.LastError = err.Error()
		switch {
		case p.failing:
			log.Debug("heartbeat failed", "err", err)
		case p.everOK:
			log.Warn("lost redirector", "err", err, "retry_in", p.interval)
		default:
			log.Warn("cannot join redirector", "err", err, "retry_in", p.interval)
		}
		p.failing = true
		return true
	}
	if reply.Removed {
		p.st.Joined, p.st.Removed, p.st.LastError = false, true, ""
		p.st.Redirector = reply.Redirector
		log.Warn("removed from redirector by an admin: no more heartbeats to it until restart",
			"redirector_id", reply.Redirector)
		return false
	}
	if p.failing || !p.everOK {
		log.Info("joined redirector", "redirector_id", reply.Redirector, "member", m.ID)
	}
	if reply.Drained != p.st.Drained && p.everOK {
		log.Info("redirector changed drain state", "drained", reply.Drained)
	}
	if p.failing || !p.everOK || !reply.Digest {
		// A redirector that (re)joined us, or holds no digest of ours.
		p.digestStale = true
	}
	p.failing, p.everOK = false, true
	j.startWatch(p, m.ID, m.Instance)
	p.st.Joined, p.st.LastOK, p.st.LastError = true, time.Now(), ""
	p.st.Drained, p.st.Redirector = reply.Drained, reply.Redirector
	if reply.IntervalMS > 0 {
		p.interval = min(max(reply.Interval(), MinInterval), MaxInterval)
		p.st.Interval = p.interval
	}
	return true
}

// send posts one heartbeat and decodes the reply.
func (j *Joiner) send(ctx context.Context, base string, m *Member) (HeartbeatReply, error) {
	var reply HeartbeatReply
	if err := m.Validate(); err != nil {
		return reply, fmt.Errorf("this member's description is invalid: %w", err)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return reply, fmt.Errorf("encoding heartbeat: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/members", bytes.NewReader(body))
	if err != nil {
		return reply, fmt.Errorf("heartbeat: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := j.do(req)
	if err != nil {
		return reply, fmt.Errorf("heartbeat: %w", err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return reply, fmt.Errorf("heartbeat: %w", responseError(resp))
	}
	if err := Decode(resp.Body, &reply); err != nil {
		return reply, fmt.Errorf("heartbeat reply: %w", err)
	}
	return reply, nil
}

// leave tells a redirector the member is going away.
func (j *Joiner) leave(ctx context.Context, base, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete,
		base+"/api/v1/members?id="+url.QueryEscape(id), nil)
	if err != nil {
		return err
	}
	resp, err := j.do(req)
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent, http.StatusNotFound:
		return nil // gone either way
	}
	return responseError(resp)
}

func (j *Joiner) do(req *http.Request) (*http.Response, error) {
	if j.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+j.opts.Token)
	}
	req.Header.Set("Accept", "application/json")
	return j.client.Do(req)
}

// responseError describes a non-success answer, with the protocol Error's
// message when the body is one.
func responseError(resp *http.Response) error {
	var e Error
	if err := Decode(resp.Body, &e); err == nil && e.Error != "" {
		return fmt.Errorf("%s: %s", resp.Status, e.Error)
	}
	return errors.New(resp.Status)
}

// drainClose reads a little of what is left so the connection can be
// reused, then closes the body.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

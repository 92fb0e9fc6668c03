package fed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// EventsPath is where a member tells a redirector that files appeared or
// went (POST, an Events body): cmsd's have and gone notices, in this
// protocol. A redirector forgets the negative answers and the replicas
// they make wrong, and tells its own parents (docs/federation.md).
const EventsPath = "/api/v1/members/events"

// MaxEvents bounds one Events message; a member sends more in several.
const MaxEvents = 1024

// Events is the body of POST EventsPath.
type Events struct {
	Version string `json:"version"`
	// ID and Instance name the member as its heartbeats do: a
	// redirector takes events only from a member it knows, of that
	// instance.
	ID       string  `json:"id"`
	Instance string  `json:"instance"`
	Events   []Event `json:"events"`
}

// Event says that the file at Path (a clean logical path) is now present
// (created, renamed there) or not (removed, renamed away).
type Event struct {
	Path    string `json:"path"`
	Present bool   `json:"present"`
	// Seq numbers the member's notices (from 1, in order): a digest says
	// up to which one it includes them (fed.DigestPath).
	Seq uint64 `json:"seq,omitempty"`
}

// Validate checks an Events message's bounds and paths.
func (e *Events) Validate() error {
	if e.ID == "" || e.Instance == "" {
		return fmt.Errorf("events: id and instance are required")
	}
	if len(e.Events) == 0 || len(e.Events) > MaxEvents {
		return fmt.Errorf("events: %d given, want 1 to %d", len(e.Events), MaxEvents)
	}
	for i, ev := range e.Events {
		if p, err := CleanLogical(ev.Path); err != nil || p != ev.Path || p == "/" {
			return fmt.Errorf("events[%d]: path %.80q is not a clean logical file path", i, ev.Path)
		}
	}
	return nil
}

// Upstream is one kind of link a member keeps to its parents: wanda
// redirectors over this protocol (Joiner), an XRootD manager over cmsd
// (package fed/cmsd). A member holds a list of them and tells each the
// same things.
type Upstream interface {
	// Beat says what the member advertises changed (exports, members,
	// drain): a parent hears it now, not at the next interval.
	Beat()
	// Notify says a file appeared (present) or went; it never blocks
	// (notices that cannot be queued are dropped, and counted).
	Notify(path string, present bool)
	// Status reports each parent of this kind.
	Status() []ParentStatus
	// Stop leaves the parents, bounded by ctx.
	Stop(ctx context.Context)
}

// Asker asks one member where a file is over the member's own transport
// (a cmsd member's connection); a redirector holds one for each member
// that does not answer this protocol's locate API.
type Asker interface {
	Locate(ctx context.Context, path string) (Located, error)
}

var _ Upstream = (*Joiner)(nil)

// maxQueuedEvents bounds the notices a Joiner keeps per parent while a
// send is under way; older ones go first when it overflows (a lost notice
// costs a stale cache entry at the parent, which its TTL ends).
const maxQueuedEvents = 4 * MaxEvents

// Notify queues a notice for every parent (see Upstream), numbered.
func (j *Joiner) Notify(path string, present bool) {
	seq := j.seq.Add(1)
	for _, p := range j.parents {
		p.mu.Lock()
		if len(p.events) >= maxQueuedEvents {
			p.events = p.events[1:]
			p.eventsDropped++
		}
		p.events = append(p.events, Event{Path: path, Present: present, Seq: seq})
		p.mu.Unlock()
		select {
		case p.evKick <- struct{}{}:
		default:
		}
	}
}

// Seq is the number of the last notice (0: none yet): a digest built
// after reading it includes every notice up to it.
func (j *Joiner) Seq() uint64 { return j.seq.Load() }

// eventLoop sends a parent the queued notices, in batches, until ctx ends.
func (j *Joiner) eventLoop(ctx context.Context, p *parent) {
	defer j.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.evKick:
		}
		for {
			p.mu.Lock()
			n := min(len(p.events), MaxEvents)
			batch := append([]Event(nil), p.events[:n]...)
			p.events = p.events[n:]
			dropped := p.eventsDropped
			p.eventsDropped = 0
			joined := p.st.Joined
			p.mu.Unlock()
			if dropped > 0 {
				j.log.Warn("file notices dropped: the redirector was slower than the changes", "redirector", p.url, "dropped", dropped)
				j.digestLost(p)
			}
			if n == 0 {
				break
			}
			if !joined {
				// Not a member there (yet): it will ask when it needs to.
				j.digestLost(p)
				continue
			}
			if err := j.sendEvents(ctx, p.url, batch); err != nil && ctx.Err() == nil {
				j.log.Debug("file notices not delivered", "redirector", p.url, "events", len(batch), "err", err)
				j.digestLost(p)
			}
		}
	}
}

func (j *Joiner) sendEvents(ctx context.Context, base string, evs []Event) error {
	var m Member
	if j.opts.Self != nil {
		m = j.opts.Self()
	}
	body, err := json.Marshal(Events{Version: Version, ID: m.ID, Instance: m.Instance, Events: evs})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+EventsPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := j.do(req)
	if err != nil {
		return ShortErr(err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return responseError(resp)
	}
	return nil
}

package monitor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// Defaults of CollectorOptions.
const (
	DefaultBatch          = 500
	DefaultFlushInterval  = time.Second
	DefaultCollectorQueue = 10000
	DefaultPostTimeout    = 10 * time.Second
)

// CollectorOptions configure the HTTP collector records are sent to:
// batches of JSON lines POSTed as application/x-ndjson.
type CollectorOptions struct {
	URL string
	// Batch is the most records of one POST (default DefaultBatch);
	// Interval the longest a record waits for its batch (default
	// DefaultFlushInterval).
	Batch    int
	Interval time.Duration
	// Queue bounds the records waiting to be sent; more are dropped
	// (default DefaultCollectorQueue).
	Queue int
	// Timeout bounds one POST (default DefaultPostTimeout). A batch is
	// tried three times, then dropped.
	Timeout time.Duration
	// Client sends the batches (default: a client of its own).
	Client *http.Client
}

// CheckCollectorURL checks a collector's URL.
func CheckCollectorURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL", raw)
	}
	return nil
}

// collector sends records from its own bounded queue, on its own
// goroutine: a slow or absent collector costs dropped records, never
// the file's or the data path's time.
type collector struct {
	o       CollectorOptions
	q       chan []byte
	stop    chan struct{}
	done    chan struct{}
	dropped func(string, int)
	written func(string, int)
	log     *slog.Logger
	lastErr time.Time
}

func newCollector(o CollectorOptions, dropped, written func(string, int), log *slog.Logger) (*collector, error) {
	if err := CheckCollectorURL(o.URL); err != nil {
		return nil, fmt.Errorf("records collector: %w", err)
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.Interval <= 0 {
		o.Interval = DefaultFlushInterval
	}
	if o.Queue <= 0 {
		o.Queue = DefaultCollectorQueue
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultPostTimeout
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	c := &collector{o: o, q: make(chan []byte, o.Queue), stop: make(chan struct{}), done: make(chan struct{}),
		dropped: dropped, written: written, log: log}
	go c.run()
	return c, nil
}

// offer queues one encoded record, or drops and counts it.
func (c *collector) offer(line []byte) {
	select {
	case c.q <- line:
	default:
		c.dropped("collector_queue_full", 1)
	}
}

func (c *collector) run() {
	defer close(c.done)
	var buf bytes.Buffer
	n := 0
	t := time.NewTicker(c.o.Interval)
	defer t.Stop()
	send := func(final bool) {
		if n > 0 {
			c.post(buf.Bytes(), n, final)
		}
		buf.Reset()
		n = 0
	}
	for {
		select {
		case line := <-c.q:
			buf.Write(line)
			if n++; n >= c.o.Batch {
				send(false)
			}
		case <-t.C:
			send(false)
		case <-c.stop:
			for {
				select {
				case line := <-c.q:
					buf.Write(line)
					if n++; n >= c.o.Batch {
						send(true)
					}
					continue
				default:
				}
				break
			}
			send(true)
			return
		}
	}
}

// post sends one batch: three tries (one when stopping), then the batch
// is dropped and counted.
func (c *collector) post(body []byte, n int, final bool) {
	tries := 3
	if final {
		tries = 1
	}
	var err error
	for i := 0; i < tries; i++ {
		if i > 0 && !c.wait(time.Duration(i)*500*time.Millisecond) {
			break
		}
		if err = c.postOnce(body); err == nil {
			c.written("collector", n)
			return
		}
	}
	c.dropped("collector_error", n)
	if now := time.Now(); now.Sub(c.lastErr) >= time.Minute {
		c.lastErr = now
		c.log.Warn("records: the collector refused a batch (dropped, counted in wanda_records_dropped_total)", "records", n, "err", err)
	}
}

func (c *collector) postOnce(body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.o.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL: it may hold credentials
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

// wait waits d, or less when stopping (false).
func (c *collector) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.stop:
		return false
	}
}

// close sends what is queued (one try per batch) and stops.
func (c *collector) close() {
	close(c.stop)
	<-c.done
}

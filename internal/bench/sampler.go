package bench

import (
	"sync"
	"time"
)

// Series is a transfer rate sampled at a fixed interval, as seed 000
// sampled interface byte counters every 5 s.
type Series struct {
	Name  string
	Every time.Duration
	// Rates are MB/s (1e6 bytes) over each interval, in order.
	Rates []float64
	// Bytes is the counter's total movement from Start to Stop, and
	// Seconds the time it took (wall time of the sampled phase).
	Bytes   int64
	Seconds float64
}

// Sampler samples a byte counter at a fixed interval.
type Sampler struct {
	r       *Run
	name    string
	every   time.Duration
	counter func() int64

	mu      sync.Mutex
	quit    chan struct{}
	done    chan struct{}
	rates   []float64
	first   int64
	startAt time.Time
}

// Sampler returns a sampler of counter (bytes moved so far) every interval.
func (r *Run) Sampler(name string, every time.Duration, counter func() int64) *Sampler {
	return &Sampler{r: r, name: name, every: every, counter: counter}
}

// Start begins sampling.
func (s *Sampler) Start() {
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	s.first = s.counter()
	s.startAt = time.Now()
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.every)
		defer t.Stop()
		last, lastAt := s.first, s.startAt
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
				v := s.counter()
				now := time.Now() // when the counter was read, not when the tick was sent
				dt := now.Sub(lastAt).Seconds()
				if dt > 0 {
					s.mu.Lock()
					s.rates = append(s.rates, float64(v-last)/1e6/dt)
					s.mu.Unlock()
				}
				last, lastAt = v, now
			}
		}
	}()
}

// Stop ends sampling, records the series in the run and returns it. The
// last partial interval is not a sample (it would bias the tail).
func (s *Sampler) Stop() Series {
	close(s.quit)
	<-s.done
	s.mu.Lock()
	ser := Series{Name: s.name, Every: s.every, Rates: append([]float64(nil), s.rates...),
		Bytes: s.counter() - s.first, Seconds: time.Since(s.startAt).Seconds()}
	s.mu.Unlock()
	s.r.mu.Lock()
	s.r.series = append(s.r.series, ser)
	s.r.mu.Unlock()
	return ser
}

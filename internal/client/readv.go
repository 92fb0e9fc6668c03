package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sync"
)

// readVParallel bounds the batches of one vector read in flight, and the
// single-range requests of a fallback.
const readVParallel = 4

// ReadV fetches want with multi-range GETs: the ranges are sorted,
// coalesced across small gaps and cut into batches that respect the
// server's header and range-count limits (PlanReadV); batches go in
// parallel. Whatever an answer did not carry — a server that ignores
// multi-range (200), answers only the first range, or sends a body that
// does not parse — is fetched with parallel single-range requests, and the
// downgrade is logged at debug level.
func (t *HTTPTransport) ReadV(ctx context.Context, u *url.URL, want []Range, dst [][]byte) error {
	sc, err := NewScatter(want, dst)
	if err != nil {
		return err
	}
	plan, err := PlanReadV(want, math.MaxInt64, t.PlanOptions)
	if err != nil {
		return err
	}
	errs := make([]error, len(plan.Batches))
	var wg sync.WaitGroup
	sem := make(chan struct{}, readVParallel)
	for i, b := range plan.Batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = t.readBatch(ctx, u, b, sc)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrUnusableRanges) {
			return err
		}
	}
	missing := sc.Missing()
	if len(missing) == 0 {
		return nil
	}
	t.Log.Debug("multi-range answer incomplete: fetching the rest with single-range requests",
		"url", Redact(u), "missing_ranges", len(missing), "reason", errors.Join(errs...))
	// Fetch what is missing one range per request, still coalesced.
	single, err := PlanReadV(missing, math.MaxInt64, PlanOptions{Gap: t.PlanOptions.Gap, MaxRanges: 1, MaxHeader: t.PlanOptions.MaxHeader, MaxBatchBytes: t.PlanOptions.MaxBatchBytes})
	if err != nil {
		return err
	}
	errs = make([]error, len(single.Batches))
	for i, b := range single.Batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = t.readBatch(ctx, u, b, sc)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if m := sc.Missing(); len(m) > 0 {
		return fmt.Errorf("GET %s: %d ranges still missing after single-range requests (first %d+%d): %w", Redact(u), len(m), m[0].Off, m[0].Len, io.ErrUnexpectedEOF)
	}
	return nil
}

// readBatch sends one Range request and scatters its answer.
func (t *HTTPTransport) readBatch(ctx context.Context, u *url.URL, b Batch, sc *Scatter) error {
	if len(b.Ranges) == 0 {
		return nil
	}
	resp, err := t.do(ctx, http.MethodGet, u, nil, 0, http.Header{"Range": {b.Header()}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		// The whole file for a multi-range request: use what we asked
		// for when it is cheap to skip to, else fall back.
		if len(b.Ranges) == 1 || resp.ContentLength < 0 || resp.ContentLength > 4*b.Bytes()+(1<<20) {
			return fmt.Errorf("%w: the server answered 200 to a Range request", ErrUnusableRanges)
		}
		return sc.Part(0, resp.ContentLength, resp.Body)
	}
	return ReadRangeBody(resp.StatusCode, resp.Header, resp.Body, sc.Part)
}

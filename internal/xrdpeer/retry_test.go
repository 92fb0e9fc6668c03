package xrdpeer

import (
	"errors"
	"fmt"
	"testing"
)

// A start that fails for a port taken meanwhile or a crash is tried again
// (with fresh ports), three times in all; another failure is final.
func TestRetryPorts(t *testing.T) {
	for _, tc := range []struct {
		err   error
		tries int
	}{
		{fmt.Errorf("xrootd: %w", errCrashed), 3},
		{fmt.Errorf("xrootd: %w", errPortInUse), 3},
		{errors.New("bad configuration"), 1},
	} {
		tries := 0
		err := retryPorts(2, func(ports []int) error {
			tries++
			if len(ports) != 2 {
				t.Errorf("%d ports, want 2", len(ports))
			}
			return tc.err
		})
		if !errors.Is(err, tc.err) || tries != tc.tries {
			t.Errorf("%v: %d tries, error %v; want %d", tc.err, tries, err, tc.tries)
		}
	}
	ok := 0
	if err := retryPorts(1, func([]int) error { ok++; return nil }); err != nil || ok != 1 {
		t.Errorf("a start that works: %d tries, %v", ok, err)
	}
}

// A restart on the same ports is tried again after a crash only.
func TestRetryCrashed(t *testing.T) {
	for _, tc := range []struct {
		err   error
		tries int
	}{
		{fmt.Errorf("xrootd: %w", errCrashed), 3},
		{fmt.Errorf("xrootd: %w", errPortInUse), 1},
		{errors.New("bad configuration"), 1},
		{nil, 1},
	} {
		tries := 0
		err := retryCrashed(func() error { tries++; return tc.err })
		if !errors.Is(err, tc.err) || tries != tc.tries {
			t.Errorf("%v: %d tries, error %v; want %d", tc.err, tries, err, tc.tries)
		}
	}
	tries := 0
	err := retryCrashed(func() error {
		if tries++; tries == 1 {
			return errCrashed
		}
		return nil
	})
	if err != nil || tries != 2 {
		t.Errorf("a crash, then a start: %d tries, %v", tries, err)
	}
}

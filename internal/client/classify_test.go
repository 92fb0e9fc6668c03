package client_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
)

// TestClassifyStatus: which answers are tried again, where.
func TestClassifyStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want client.Class
	}{
		{&client.StatusError{Code: 404}, client.Fatal},
		{&client.StatusError{Code: 429}, client.Retry},
		{&client.StatusError{Code: 503, RetryAfter: 5e9}, client.Retry},
		{&client.StatusError{Code: 503}, client.Failover},
		{&client.StatusError{Code: 500}, client.Failover},
		{&client.StatusError{Code: 502}, client.Failover},
		{&client.StatusError{Code: 507}, client.Fatal}, // no space: as kXR_NoSpace
		{fmt.Errorf("PUT x: %w", &client.StatusError{Code: 507}), client.Fatal},
		{io.ErrUnexpectedEOF, client.Failover},
		{context.Canceled, client.Fatal},
	} {
		if got := client.Classify(tc.err); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}

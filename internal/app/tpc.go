package app

import (
	"crypto/tls"
	"log/slog"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/tpc"
)

// newCopier builds the third-party copier of a server; nil when TPC is
// off.
func newCopier(c config.TPC, log *slog.Logger, m *metrics.TPC) (*tpc.Copier, error) {
	if !c.Enabled {
		return nil, nil
	}
	roots, err := cred.RootCAs(c.CA)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	if roots != nil {
		tc = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return tpc.New(tpc.Options{
		Allow: c.Allow, Deny: c.Deny, TLS: tc,
		FirstByte: c.FirstByteTimeout, Stall: c.StallTimeout, Attempts: c.Attempts,
		MaxStreams: c.MaxStreams, DefaultStreams: c.Streams, MaxActive: c.MaxActive,
		Log: log.With("component", "tpc"), Metrics: m,
	})
}

package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/metrics"
	"github.com/wanda-fed/wanda/internal/s3conn"
	"github.com/wanda-fed/wanda/internal/storage/s3"
)

// newS3Export connects an s3://BUCKET/PREFIX export (docs/s3.md); what
// the config leaves empty comes from the AWS environment.
func newS3Export(e config.Export, onWrite []string, bufs *bufpool.Pool, m *metrics.S3, log *slog.Logger) (*s3.Backend, error) {
	bucket, prefix, err := s3.ParseURL(e.Path)
	if err != nil {
		return nil, err
	}
	c := s3conn.Conn{
		Endpoint:   e.S3.Endpoint,
		Region:     e.S3.Region,
		Addressing: s3conn.Addressing(e.S3.Addressing),
		AccessKey:  e.S3.AccessKey,
		Wrap:       func(next http.RoundTripper) http.RoundTripper { return m.Transport(e.Prefix, next) },
	}
	if e.S3.SecretKeyFile != "" {
		b, err := os.ReadFile(e.S3.SecretKeyFile)
		if err != nil {
			return nil, fmt.Errorf("s3.secret_key_file: %w", err)
		}
		c.SecretKey = strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s3.New(ctx, s3.Options{
		Conn:        c,
		Bucket:      bucket,
		Prefix:      prefix,
		OnWrite:     onWrite,
		Buffers:     bufs,
		PartSize:    int(e.S3.PartSize),
		Concurrency: e.S3.Concurrency,
		SweepAge:    e.S3.AbandonedUploadAge,
		ReadOnly:    e.ReadOnly,
		Log:         log.With("component", "s3", "export", e.Prefix),
	})
}

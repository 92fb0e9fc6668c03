package s3

import (
	"context"
	"strings"
	"time"
)

// Sweep aborts the multipart uploads under the export's prefix started
// more than age ago: uploads of a crashed or killed server, which S3 keeps
// (and bills) until aborted. It returns how many it aborted. The uploads
// are listed without a prefix and filtered here: MinIO lists only the
// uploads of the one key a prefix names, all of them without one.
func (b *Backend) Sweep(ctx context.Context, age time.Duration) (int, error) {
	cutoff := time.Now().Add(-age)
	keyMarker, idMarker := "", ""
	n := 0
	for {
		res, err := b.core.ListMultipartUploads(ctx, b.bucket, "", keyMarker, idMarker, "", 1000)
		if err != nil {
			return n, mapErr(err)
		}
		for _, up := range res.Uploads {
			if up.Initiated.After(cutoff) || !strings.HasPrefix(up.Key, b.root) {
				continue
			}
			if err := b.core.AbortMultipartUpload(ctx, b.bucket, up.Key, up.UploadID); err != nil {
				return n, mapErr(err)
			}
			n++
			b.log.Info("s3: aborted an abandoned multipart upload", "bucket", b.bucket, "key", up.Key, "initiated", up.Initiated)
		}
		if !res.IsTruncated {
			return n, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// sweepLoop sweeps at once and then every age/4 until ctx ends.
func (b *Backend) sweepLoop(ctx context.Context, age time.Duration) {
	every := max(age/4, time.Second)
	for {
		if _, err := b.Sweep(ctx, age); err != nil && ctx.Err() == nil {
			b.log.Warn("s3: sweeping abandoned multipart uploads failed", "bucket", b.bucket, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

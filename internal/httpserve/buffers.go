package httpserve

import (
	"context"
	"io"

	"github.com/wanda-fed/wanda/internal/bufpool"
)

// multipartBuffer is the response buffer of a multi-range answer: small
// parts are read straight into it and it goes out in one write.
const multipartBuffer = 256 << 10

// uploadBuffer is what an upload's body is copied through.
const uploadBuffer = 256 << 10

// copyBody copies an upload's body to dst through a buffer of the budget
// (waiting for one when it is spent). dst's own ReadFrom is bypassed: the
// copy goes through the budget's buffer, not one allocated per upload.
func (h *Handler) copyBody(ctx context.Context, dst io.Writer, body io.Reader) (int64, error) {
	b, err := h.opts.Buffers.Get(ctx, uploadBuffer)
	if err != nil {
		return 0, err
	}
	defer b.Release()
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{body}, b.B)
}

// bufWriter is a bufio.Writer over a buffer of the budget (bufio
// allocates its own).
type bufWriter struct {
	w   io.Writer
	buf []byte // len: what is buffered
}

func newBufWriter(w io.Writer, b *bufpool.Buf) *bufWriter {
	return &bufWriter{w: w, buf: b.B[:0]}
}

// Available is the room left in the buffer.
func (b *bufWriter) Available() int { return cap(b.buf) - len(b.buf) }

// AvailableBuffer is an empty slice over the room left, to append to and
// pass to Write (which then copies nothing).
func (b *bufWriter) AvailableBuffer() []byte { return b.buf[len(b.buf):len(b.buf)] }

// Write buffers p, flushing first when it does not fit; a p larger than
// the buffer goes out directly.
func (b *bufWriter) Write(p []byte) (int, error) {
	if len(p) > b.Available() {
		if err := b.Flush(); err != nil {
			return 0, err
		}
		if len(p) > cap(b.buf) {
			return b.w.Write(p)
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes what is buffered.
func (b *bufWriter) Flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

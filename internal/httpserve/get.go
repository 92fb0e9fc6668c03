package httpserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/bufpool"
	"github.com/wanda-fed/wanda/internal/httprange"
	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/storage"
)

// smallPart is the size under which a multi-range part is read with pread
// into the response buffer instead of its own sendfile: for ROOT's many 4-64
// KiB baskets one buffered write per ~256 KiB beats two syscalls per part.
const smallPart = 64 << 10

func (h *Handler) get(w http.ResponseWriter, r *http.Request) error {
	t, err := h.resolve(r.URL.Path)
	if err != nil {
		return err
	}
	if err := h.authorize(r.Context(), r, auth.Read, t); err != nil {
		return err
	}
	if !t.found {
		if kids := h.opts.Namespace.Children(t.logical); kids != nil {
			return h.listVirtual(w, r, t, kids)
		}
		return errNoExport(t)
	}
	be := t.export.Backend
	f, err := be.Open(r.Context(), t.rel)
	if errors.Is(err, storage.ErrIsDir) {
		return h.list(w, r, t)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	defer recordFile(r, fi.Size, f)()
	hdr := w.Header()
	etag := ETag(fi)
	hdr.Set("ETag", etag)
	if !fi.ModTime.IsZero() {
		// Unknown (a cache of an upstream that gave none): no date at
		// all rather than year 1, which would satisfy any condition.
		hdr.Set("Last-Modified", fi.ModTime.UTC().Format(http.TimeFormat))
	}
	hdr.Set("Accept-Ranges", "bytes")
	if err := h.addDigests(r, hdr, t, fi.Size); err != nil {
		return err
	}
	if done := checkConditions(w, r, etag, fi.ModTime); done {
		return nil
	}
	ctype := contentType(t.logical)

	rangeHdr := r.Header.Get("Range")
	if rangeHdr != "" && !ifRangeHolds(r, etag, fi.ModTime) {
		rangeHdr = ""
	}
	if rangeHdr == "" {
		hdr.Set("Content-Type", ctype)
		hdr.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusOK)
			return nil
		}
		filled, err := fillFirst(r.Context(), f, 0, fi.Size)
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return sendRange(r.Context(), w, f, 0, fi.Size, filled, h.opts.Buffers)
	}
	ranges, err := httprange.Parse(rangeHdr, fi.Size, h.opts.MaxRanges)
	if err != nil {
		if errors.Is(err, httprange.ErrUnsatisfiable) {
			hdr.Set("Content-Range", "bytes */"+strconv.FormatInt(fi.Size, 10))
		}
		return &Error{Status: http.StatusRequestedRangeNotSatisfiable, Msg: err.Error()}
	}
	if strings.Count(rangeHdr, ",") == 0 {
		rg := ranges[0]
		hdr.Set("Content-Type", ctype)
		hdr.Set("Content-Range", rg.ContentRange(fi.Size))
		hdr.Set("Content-Length", strconv.FormatInt(rg.Length, 10))
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusPartialContent)
			return nil
		}
		filled, err := fillFirst(r.Context(), f, rg.Start, rg.Length)
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusPartialContent)
		return sendRange(r.Context(), w, f, rg.Start, rg.Length, filled, h.opts.Buffers)
	}
	// Several ranges asked: always multipart, even if only one survived, so
	// the client parses one shape for one kind of request.
	mp := httprange.NewMultipart(ctype, fi.Size)
	hdr.Set("Content-Type", mp.HeaderContentType())
	hdr.Set("Content-Length", strconv.FormatInt(mp.Length(ranges), 10))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusPartialContent)
		return nil
	}
	if fl, ok := f.(storage.Filler); ok {
		// A cache: every missing part in one go (one upstream vector
		// read), before the status, so a failure is a 502/504.
		spans := make([]storage.Span, len(ranges))
		for i, rg := range ranges {
			spans[i] = storage.Span{Off: rg.Start, Len: rg.Length}
		}
		if err := fl.Fill(r.Context(), spans); err != nil {
			return err
		}
	}
	buf, err := h.opts.Buffers.Get(r.Context(), multipartBuffer)
	if err != nil {
		return err
	}
	defer buf.Release()
	w.WriteHeader(http.StatusPartialContent)
	if err := sendMultipart(r.Context(), newBufWriter(w, buf), w, f, mp, ranges, h.opts.Buffers); err != nil {
		return err
	}
	var n int64
	for _, rg := range ranges {
		n += rg.Length
	}
	monitor.FromContext(r.Context()).ReadV(len(ranges), n)
	return nil
}

// fillFirst has a Filler fetch the first chunk of a range before the
// status is sent: an upstream that fails at once is answered 502/504
// instead of a cut connection. It returns the bytes filled.
func fillFirst(ctx context.Context, f storage.File, off, n int64) (int64, error) {
	fl, ok := f.(storage.Filler)
	if !ok || n <= 0 {
		return 0, nil
	}
	k := min(fillChunk, n)
	return k, fl.Fill(ctx, []storage.Span{{Off: off, Len: k}})
}

// fillChunk is how much of a range a Filler is asked for at a time while
// it is sent: the client gets the first bytes early, the rest follows.
const fillChunk = 8 << 20

// sendRange copies [off, off+n) to w: with sendfile when the backend hands
// out an *os.File and w reaches a TCP connection, else through a buffer.
// A Filler's bytes are made local chunk by chunk ahead of the copy.
// filled bytes at off are known to be local already.
func sendRange(ctx context.Context, w io.Writer, f storage.File, off, n, filled int64, bufs *bufpool.Pool) error {
	if fl, ok := f.(storage.Filler); ok {
		for done := int64(0); done < n; {
			k := min(fillChunk, n-done)
			if done >= filled {
				if err := fl.Fill(ctx, []storage.Span{{Off: off + done, Len: k}}); err != nil {
					return err
				}
			}
			if err := copyRange(ctx, w, f, off+done, k, bufs); err != nil {
				return err
			}
			done += k
		}
		return nil
	}
	return copyRange(ctx, w, f, off, n, bufs)
}

// copyBuffer is the buffer of a copy that cannot go by sendfile (a
// backend without a descriptor: S3), from the server's budget: a read of
// the backend costs more than a read of a file, so it reads a lot at a
// time (net/http's own copy reads 32 KiB). 4 MiB: a GET through wanda
// from MinIO took 0.83-0.90 s per GiB against 0.95 with 1 MiB (A/B, same
// MinIO, 5 and 7 rounds, 2026-11-26); fewer, longer writes wake the Go
// scheduler less. It stays below the S3 backend's parallel-read size
// (8 MiB), which would turn each read into new GETs.
const copyBuffer = 4 << 20

func copyRange(ctx context.Context, w io.Writer, f storage.File, off, n int64, bufs *bufpool.Pool) error {
	var m int64
	var err error
	if of, ok := f.(storage.OSFile); ok {
		// Our own descriptor: seeking it races with nobody.
		osf := of.OSFile()
		if _, err := osf.Seek(off, io.SeekStart); err != nil {
			return err
		}
		m, err = io.Copy(w, &io.LimitedReader{R: osf, N: n})
	} else {
		b, berr := bufs.Get(ctx, int(min(n, copyBuffer)))
		if berr != nil {
			return berr
		}
		m, err = io.CopyBuffer(struct{ io.Writer }{w}, io.NewSectionReader(f, off, n), b.B)
		b.Release()
	}
	if err == nil && m != n {
		err = fmt.Errorf("file shrank while sending: %d of %d bytes: %w", m, n, io.ErrUnexpectedEOF)
	}
	return err
}

// sendMultipart writes the parts through bw, a buffer over w. Small
// parts are pread straight into the buffer; large ones flush it and go by
// sendfile.
func sendMultipart(ctx context.Context, bw *bufWriter, w io.Writer, f storage.File, mp *httprange.Multipart, ranges []httprange.Range, bufs *bufpool.Pool) error {
	var hdr []byte
	for i, rg := range ranges {
		hdr = mp.AppendPartHeader(hdr[:0], i, rg)
		if _, err := bw.Write(hdr); err != nil {
			return err
		}
		if rg.Length > smallPart {
			if err := bw.Flush(); err != nil {
				return err
			}
			if err := sendRange(ctx, w, f, rg.Start, rg.Length, rg.Length, bufs); err != nil { // filled before the status
				return err
			}
			continue
		}
		if bw.Available() < int(rg.Length) {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		buf := bw.AvailableBuffer()[:rg.Length]
		if n, err := f.ReadAt(buf, rg.Start); n < len(buf) {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("file shrank while sending: %w", io.ErrUnexpectedEOF)
			}
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	if _, err := bw.Write(mp.AppendTrailer(hdr[:0])); err != nil {
		return err
	}
	return bw.Flush()
}

// ETag is a strong validator from size, mtime and inode: a file replaced
// by an upload (new inode) gets a new tag even with the same size and time.
func ETag(fi storage.FileInfo) string {
	return `"` + strconv.FormatInt(fi.Size, 36) + "-" + strconv.FormatInt(fi.ModTime.UnixNano(), 36) + "-" + strconv.FormatUint(fi.Inode, 36) + `"`
}

// checkConditions evaluates If-None-Match and If-Modified-Since for GET and
// HEAD (RFC 9110 §13.2.2 order) and answers 304 itself; it reports whether
// the answer is complete.
func checkConditions(w http.ResponseWriter, r *http.Request, etag string, mod time.Time) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		if etagListMatch(inm, etag, false) {
			w.WriteHeader(http.StatusNotModified)
			return true
		}
		return false
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" && !mod.IsZero() {
		if t, err := http.ParseTime(ims); err == nil && !mod.Truncate(time.Second).After(t) {
			w.WriteHeader(http.StatusNotModified)
			return true
		}
	}
	return false
}

// ifRangeHolds reports whether a Range should be honoured given If-Range:
// a strong ETag must match exactly, a date must equal Last-Modified.
func ifRangeHolds(r *http.Request, etag string, mod time.Time) bool {
	ir := strings.TrimSpace(r.Header.Get("If-Range"))
	switch {
	case ir == "":
		return true
	case strings.HasPrefix(ir, `"`):
		return ir == etag
	case strings.HasPrefix(ir, "W/"):
		return false // weak tags never validate a range
	}
	t, err := http.ParseTime(ir)
	return err == nil && !mod.IsZero() && mod.Truncate(time.Second).Equal(t)
}

// etagListMatch implements the comparison of If-Match / If-None-Match lists;
// weak comparison for If-None-Match, as RFC 9110 requires.
func etagListMatch(list, etag string, strong bool) bool {
	if strings.TrimSpace(list) == "*" {
		return true
	}
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimSpace(t)
		if !strong {
			t = strings.TrimPrefix(t, "W/")
		} else if strings.HasPrefix(t, "W/") {
			continue
		}
		if t == etag {
			return true
		}
	}
	return false
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".root":
		return "application/octet-stream"
	case "":
		return "application/octet-stream"
	}
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		return ct
	}
	return "application/octet-stream"
}

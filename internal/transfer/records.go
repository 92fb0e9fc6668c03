package transfer

import (
	"net/url"
	"strings"

	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// startRecord starts the record of one attempt at f (nil: records off):
// the destination's path and scheme, the submitter's subject, the bytes
// moved so far for progress records.
func (s *Service) startRecord(f store.File, prog *progress) *monitor.Access {
	if s.o.Records == nil {
		return nil
	}
	proto, path := "", ""
	if u, err := url.Parse(f.Destination); err == nil {
		proto, path = u.Scheme, u.Path
	}
	acc := s.o.Records.Start(monitor.Begin{Type: monitor.TypeTransfer, Protocol: proto, Op: "transfer", Path: path})
	// The submitter is "issuer#subject" (the record names the subject),
	// a certificate's DN, or "anonymous" (no user).
	if _, sub, ok := strings.Cut(f.Submitter, "#"); ok {
		acc.SetUser(sub)
	} else if f.Submitter != "anonymous" && f.Submitter != "" {
		acc.SetUser(f.Submitter)
	}
	acc.SetSize(f.Filesize)
	acc.SetTransfer(redact(f.Sources[f.SourceIndex]), redact(f.Destination), "")
	acc.Live(func() (int64, int64) { n := prog.moved(); return n, n })
	return acc
}

// endRecord ends acc with the attempt's outcome.
func endRecord(acc *monitor.Access, a store.Attempt) {
	if acc == nil {
		return
	}
	acc.SetTransfer(redact(a.Source), redact(a.Destination), a.Mode)
	acc.Read(a.Bytes)
	acc.Write(a.Bytes)
	if a.ErrorClass != "" {
		acc.Fail(a.ErrorClass, 0)
	} else {
		acc.Succeed(monitor.ResultOK, 0)
	}
	acc.End()
}

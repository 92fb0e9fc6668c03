package tpc

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Markers writes a COPY's answer body, the text/perf-marker-stream of
// the WLCG HTTP-TPC specification (as XrdHttpTPC and dCache write it):
// a perf marker every interval while the copy runs, then one final line,
// "success: Created" or "failure: <reason>: <details>".
type Markers struct {
	w     io.Writer
	flush func()
	err   error // the first write error: the client went away
}

// NewMarkers writes to w, flushing after each marker when w can.
func NewMarkers(w io.Writer) *Markers {
	m := &Markers{w: w, flush: func() {}}
	if f, ok := w.(http.Flusher); ok {
		m.flush = f.Flush
	}
	return m
}

// Gone reports that a write failed: nobody reads the markers any more.
func (m *Markers) Gone() bool { return m.err != nil }

func (m *Markers) write(s string) {
	if m.err != nil {
		return
	}
	if _, err := io.WriteString(m.w, s); err != nil {
		m.err = err
		return
	}
	m.flush()
}

// Marker writes one perf marker of p's state.
func (m *Markers) Marker(p *Progress, now time.Time) {
	var b strings.Builder
	fmt.Fprintf(&b, "Perf Marker\n")
	fmt.Fprintf(&b, "Timestamp: %d\n", now.Unix())
	fmt.Fprintf(&b, "Stripe Index: 0\n")
	fmt.Fprintf(&b, "Stripe Bytes Transferred: %d\n", p.Bytes())
	fmt.Fprintf(&b, "Total Stripe Count: 1\n")
	if r := p.Remotes(); len(r) > 0 {
		fmt.Fprintf(&b, "RemoteConnections: %s\n", strings.Join(r, ","))
	}
	fmt.Fprintf(&b, "End\n")
	m.write(b.String())
}

// Verified says, before the final line, that the copy's checksum was
// compared end to end ("adler32:0a1b2c3d"): wanda's client then need not
// ask both ends again. Other clients skip a line they do not know (gfal2
// and davix read only the fields of perf markers and the final line).
func (m *Markers) Verified(sum string) { m.write("Wanda-Checksum-Verified: " + sum + "\n") }

// Success ends the stream of a copy that succeeded.
func (m *Markers) Success() { m.write("success: Created\n") }

// Failure ends the stream of a copy that failed.
func (m *Markers) Failure(err error) { m.write("failure: " + Message(err) + "\n") }

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
func (m *Markers) Marker(p *Progress, now time.Time) { m.write(marker(p, now)) }

func marker(p *Progress, now time.Time) string {
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
	return b.String()
}

// End writes the last marker, the final line and before it, when the
// copy's checksum was compared end to end, a line that says so
// ("Wanda-Checksum-Verified: adler32:0a1b2c3d": wanda's client then need
// not ask both ends again; gfal2 and davix read only the markers' fields
// and the final line), in one write: a short copy's whole answer leaves
// in one packet.
func (m *Markers) End(p *Progress, now time.Time, verified string, err error) {
	s := marker(p, now)
	switch {
	case err != nil:
		s += "failure: " + Message(err) + "\n"
	case verified != "":
		s += "Wanda-Checksum-Verified: " + verified + "\nsuccess: Created\n"
	default:
		s += "success: Created\n"
	}
	m.write(s)
}

package wan

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkRelay measures the relay's overhead: one stream through it with
// no delay and no limits, against the same stream straight to the server.
// relay/direct is the throughput ratio (1 = free).
func BenchmarkRelay(b *testing.B) {
	const chunk = 1 << 20
	// The server drains the stream and answers one byte at EOF, so the
	// clock stops when every byte has arrived.
	srv := serveTCP(b, func(c *net.TCPConn) {
		buf := make([]byte, chunk)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		c.Write([]byte{1})
	})
	_, relay := startRelay(b, Config{}, srv)
	transfer := func(addr string, n int) time.Duration {
		c := dial(b, addr)
		defer c.Close()
		buf := make([]byte, chunk)
		start := time.Now()
		for range n {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.CloseWrite()
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	b.SetBytes(chunk)
	b.ReportAllocs()
	// Alternate direct and relayed rounds, so that load from elsewhere on
	// the machine weighs on both alike.
	var direct, via time.Duration
	for left := b.N; left > 0; {
		n := min(left, max(b.N/4, 1))
		left -= n
		b.StopTimer()
		direct += transfer(srv, n)
		b.StartTimer()
		via += transfer(relay, n)
	}
	b.StopTimer()
	b.ReportMetric(direct.Seconds()/via.Seconds(), "relay/direct")
	b.ReportMetric(float64(b.N)*chunk/direct.Seconds()/1e6, "direct-MB/s")
}

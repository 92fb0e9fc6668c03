package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// udpSink is the collector of the records experiment's stream server: it
// counts the packets and bytes that arrive, as a collector would receive
// them (it decodes nothing: the decoder's cost is the collector's).
type udpSink struct {
	conn           *net.UDPConn
	packets, bytes atomic.Int64
	done           chan struct{}
}

func newUDPSink() (*udpSink, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	_ = c.SetReadBuffer(8 << 20)
	s := &udpSink{conn: c, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 70000)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			s.packets.Add(1)
			s.bytes.Add(int64(n))
		}
	}()
	return s, nil
}

func (s *udpSink) Addr() string { return s.conn.LocalAddr().String() }

func (s *udpSink) counts() (packets, bytes int64) { return s.packets.Load(), s.bytes.Load() }

func (s *udpSink) Close() {
	s.conn.Close()
	<-s.done
}

// streamRate is one run of the stream server: its opens (requests) a
// second, and the stream's packets and bytes a second.
type streamRate struct{ opens, packets, bytes float64 }

// streamTable is the stream's cost per 1,000 opens a second (the median
// over the repetitions of each load).
func streamTable(perK map[string][]streamRate) string {
	var b strings.Builder
	b.WriteString("\n| load (stream server) | opens/s | packets/s per 1,000 opens/s | bytes/s per 1,000 opens/s |\n|---|---|---|---|\n")
	for _, name := range slices.Sorted(maps.Keys(perK)) {
		rs := perK[name]
		var ops, pk, by []float64
		for _, r := range rs {
			if r.opens <= 0 {
				continue
			}
			ops = append(ops, r.opens)
			pk = append(pk, r.packets/(r.opens/1000))
			by = append(by, r.bytes/(r.opens/1000))
		}
		if len(ops) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.0f |\n", name, median(ops), median(pk), median(by))
	}
	return b.String()
}

// cpuTable is the servers' CPU per request (medians), each against the
// server with neither records nor stream.
func cpuTable(per map[string]map[string][]float64) string {
	var b strings.Builder
	b.WriteString("\n| load | CPU µs per request: off | records | XRootD stream | records / off | stream / off |\n|---|---|---|---|---|---|\n")
	for _, name := range slices.Sorted(maps.Keys(per)) {
		m := per[name]
		if len(m["off"]) == 0 || len(m["on"]) == 0 || len(m["stream"]) == 0 {
			continue
		}
		off, on, st := median(m["off"]), median(m["on"]), median(m["stream"])
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.3f | %.3f |\n", name, off, on, st, on/off, st/off)
	}
	return b.String()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// scrapeDropped reads a server's wanda_xrootd_monitor_dropped_total for
// reason queue_full.
func scrapeDropped(ctx context.Context, base string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "wanda_xrootd_monitor_dropped_total{") && strings.Contains(line, `reason="queue_full"`) {
			return strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no wanda_xrootd_monitor_dropped_total{reason=\"queue_full\"}")
}

package cmsd

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/xrootd/cms"
)

// loadOf is a member's load as cmsd reports it, in percent: cpu from the
// host's one-minute load average per core, the run queue from the
// requests in progress, memory from the host's available memory, disk
// from the use of the member's writable space. cmsd's net and paging
// figures have no counterpart here and are 0.
func loadOf(m fed.Member) cms.Load {
	l := cms.Load{
		CPU:    pct(hostLoadAvg() * 100 / float64(runtime.NumCPU())),
		Xeq:    pct(float64(m.Load.Active)),
		Mem:    pct(hostMemUsed()),
		FreeMB: clamp32(m.Load.FreeBytes >> 20),
	}
	if t := m.Load.TotalBytes; t > 0 {
		l.Dsk = pct(float64(t-m.Load.FreeBytes) * 100 / float64(t))
	}
	return l
}

func pct(v float64) uint8 {
	switch {
	case v <= 0 || v != v:
		return 0
	case v >= 100:
		return 100
	}
	return uint8(v)
}

// hostLoadAvg reads the one-minute load average (0 where there is none).
func hostLoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// hostMemUsed is the share of memory in use, in percent (0 where unknown).
func hostMemUsed() float64 {
	fh, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer fh.Close()
	var total, avail float64
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	if total <= 0 {
		return 0
	}
	return (total - avail) * 100 / total
}

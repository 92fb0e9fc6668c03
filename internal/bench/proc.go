package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Roles run as child processes of this binary (`wanda server`, `wanda
// redirector`), for the experiments that measure one role's CPU and
// memory apart from everything else. A child logs JSON at info level to a
// file in the scratch directory (its access log included, as a default
// deployment logs); the URL it serves on is read from its "serving" line.

// childProc is a running child.
type childProc struct {
	Name string
	URL  string
	Log  string // its stderr and stdout

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// startChild runs this binary with args and waits (polling its log, at
// most a minute) for the JSON line whose msg is ready and which carries
// the URL. It stops at the run's cleanup.
func (r *Run) startChild(ctx context.Context, name, ready string, args ...string) (*childProc, error) {
	dir := filepath.Join(r.Dir(), "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := &childProc{Name: name, Log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(r.Wanda(), args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	err = p.cmd.Start()
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, r.Wanda(), err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	r.Cleanup(p.stop)

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	for {
		if u := childURL(p.Log, ready); u != "" {
			p.URL = u
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited (%v) before serving: %s", name, p.waitErr, p.tail())
		case <-limit.C:
			p.stop()
			return nil, fmt.Errorf("%s: no %q line in its log within a minute (is %s the wanda binary?): %s", name, ready, r.Wanda(), p.tail())
		case <-ctx.Done():
			p.stop()
			return nil, context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// childURL finds the url of the first JSON log line whose msg is ready.
func childURL(path, ready string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == ready && line.URL != "" {
			return line.URL
		}
	}
	return ""
}

// tail is the end of the child's log, for error messages.
func (p *childProc) tail() string {
	b, _ := os.ReadFile(p.Log)
	b = bytes.TrimSpace(b)
	if len(b) > 600 {
		b = append([]byte("..."), b[len(b)-600:]...)
	}
	return string(b)
}

// stop asks the child to shut down (SIGTERM: servers leave their
// redirector first) and kills it after 10 s.
func (p *childProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// procUsage is a process's CPU time and resident memory, from /proc.
type procUsage struct {
	CPU time.Duration // user + system
	RSS int64         // bytes
}

// usage reads the child's CPU time and RSS (Linux /proc).
func (p *childProc) usage() (procUsage, error) {
	u, err := readProcUsage(p.cmd.Process.Pid)
	if err != nil {
		if gone := p.exited(); gone != nil {
			return u, gone
		}
	}
	return u, err
}

// exited describes the child's end (with its log's tail) if it ended.
func (p *childProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v): %s", p.Name, p.waitErr, p.tail())
	default:
		return nil
	}
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTick = 100

func readProcUsage(pid int) (procUsage, error) {
	var u procUsage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name (field 2) may hold spaces: fields count from ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return u, errors.New("malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return u, errors.New("short /proc/PID/stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return u, errors.New("malformed times in /proc/PID/stat")
	}
	u.CPU = time.Duration(ut+st) * time.Second / clockTick
	kb, err := procStatusKiB(pid, "VmRSS")
	u.RSS = kb[0] << 10
	return u, err
}

// procStatusKiB reads fields of /proc/PID/status given in kB ("VmRSS",
// "RssAnon"), in KiB, in the order asked.
func procStatusKiB(pid int, keys ...string) ([]int64, error) {
	out := make([]int64, len(keys))
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out, err
	}
	found := 0
	for _, line := range strings.Split(string(s), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if i := slices.Index(keys, k); ok && i >= 0 {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return out, fmt.Errorf("%s %q: %w", k, v, err)
			}
			out[i] = n
			found++
		}
	}
	if found < len(keys) {
		return out, fmt.Errorf("not all of %v in /proc/%d/status", keys, pid)
	}
	return out, nil
}

// scrapeGauge reads one unlabelled-by-us gauge (the first sample of
// metric) from a role's /metrics.
func scrapeGauge(ctx context.Context, hc *http.Client, base, metric string) (float64, error) {
	body, err := openGet(ctx, hc, base+"/metrics")
	if err != nil {
		return 0, err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		v := line[strings.LastIndexByte(line, ' ')+1:]
		return strconv.ParseFloat(v, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s/metrics: no %s", base, metric)
}

// machineCPU is the whole machine's CPU time from /proc/stat's first
// line, in clock ticks: busy (user, nice, system, irq, softirq, steal)
// and all of it (busy, idle, iowait).
type machineCPU struct{ busy, total int64 }

// readMachineCPU reads /proc/stat (zero when it cannot).
func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}
	}
	var m machineCPU
	for i, s := range f[1:9] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return machineCPU{}
		}
		m.total += v
		if i != 3 && i != 4 { // idle, iowait
			m.busy += v
		}
	}
	return m
}

// busyPct is the share of the machine's CPU time that was busy between a
// and b, in percent (0 when nothing was read).
func busyPct(a, b machineCPU) float64 {
	if b.total <= a.total {
		return 0
	}
	return 100 * float64(b.busy-a.busy) / float64(b.total-a.total)
}

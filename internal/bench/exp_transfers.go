package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/wan"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

func init() {
	Register(&Experiment{
		Name:  "transfers",
		Seed:  "001",
		Title: "the transfer service between two sites over a WAN: many small files, a few large ones, a source down for a while (issue 16); the small files again through wanda's command line and FTS3's API as Rucio uses it (issue 27); three instances on one PostgreSQL, one killed and started again every 10 s (issue 29)",
		Doc: `A ` + "`wanda transfer serve`" + ` instance (SQLite) moves files from a source site, behind a ` +
			"`wanda wan`" + ` relay (RTT, a rate shared by all connections, a window per connection), to a ` +
			`destination site, by third-party copy (the destination pulls). Two phases, each submitted as jobs ` +
			`and timed from the first submission to the last job's end: many small files (10 jobs), then a few ` +
			`large ones (one job, retry 20, retry_delay 2 s), during which the source server is killed and started ` +
			`again after a pause. The ideal is the bytes at the link rate plus three round trips; the goal is ` +
			`within 1.5x of it, every file FINISHED. The optimizer's limit and the link's rate are sampled every ` +
			`second. Large files are hard links of one random file (page-cached at the source; the destination ` +
			`writes them all to disk); the small files land on tmpfs by default, and the disk's own rate for ` +
			`small files is measured beside. The CPU time of each process per file gives the CPU floor: the ` +
			`phase's CPU over the machine's cores. The cluster phase (exp_transfers_cluster.go) runs several ` +
			`instances on one PostgreSQL over the same path, small and large files at once, without kills and ` +
			`with one instance SIGKILLed and started again every kill_every: every file FINISHED with the ` +
			`source's size and adler32 at the destination, no false failure, the run with kills within 1.3x of ` +
			`the run without, and the claim rate of 1, 2 and 3 instances.`,
		Params: []Param{
			{Name: "rtt", Help: "round-trip time of the relay", Default: "50ms"},
			{Name: "rate", Help: "link rate of the relay, shared", Default: "1Gbit"},
			{Name: "window", Help: "per-connection window of the relay", Default: "4MiB"},
			{Name: "small", Help: "number of small files", Default: "10000", Quick: "400"},
			{Name: "small_size", Help: "size of a small file", Default: "64KiB"},
			{Name: "large", Help: "number of large files", Default: "20", Quick: "4"},
			{Name: "large_size", Help: "size of a large file", Default: "1GiB", Quick: "32MiB"},
			{Name: "down", Help: "how long the source is down during the large phase (0: never)", Default: "30s", Quick: "2s"},
			{Name: "link_max", Help: "the optimizer's most active transfers per link", Default: "200"},
			{Name: "job_files", Help: "files per job of the API phases (Rucio's bulk size; 0: no API phases)", Default: "200"},
			{Name: "rounds", Help: "rounds of the API phases (each: wanda transfer submit and FTS3's API, alternating which goes first)", Default: "3", Quick: "1"},
			{Name: "poll", Help: "how often the FTS3 path's bulk queries ask for the open jobs' files (Rucio's poller: jobs not updated for 60 s)", Default: "5s"},
			{Name: "small_dest", Help: "where the destination writes the small files: tmpfs (/dev/shm; the disk's own small-file rate is measured beside) or disk", Default: "tmpfs"},
			{Name: "phases", Help: "the phases to run: small (the small files), api (them again through the command line and FTS3's API), large (the large files, the source down), cluster (several instances on PostgreSQL, one killed now and then)", Default: "small api large cluster"},
			{Name: "cluster_small", Help: "cluster phase: number of small files (of small_size)", Default: "20000", Quick: "300"},
			{Name: "cluster_large", Help: "cluster phase: number of large files", Default: "20", Quick: "2"},
			{Name: "cluster_large_size", Help: "cluster phase: size of a large file (a copy cut by a kill starts again from nothing: one must take well under an instance's life, instances x kill_every)", Default: "64MiB", Quick: "8MiB"},
			{Name: "cluster_instances", Help: "cluster phase: the instance counts run without kills (the claim rate of each; the largest is also run with kills)", Default: "3 1 2"},
			{Name: "kill_every", Help: "cluster phase: one instance is SIGKILLed and started again this often (in turn)", Default: "10s", Quick: "1s"},
			{Name: "lease", Help: "cluster phase: the instances' --lease (another instance takes a dead one's files over after it)", Default: "30s"},
			{Name: "restart_takeback", Help: "cluster phase: an instance started again on its address takes its earlier life's files back at once (false: they wait for their lease)", Default: "true"},
		},
		Run: runTransfers,
	})
}

// transfersGoal is issue 16's: each phase within this factor of the ideal.
const transfersGoal = 1.5

type transfersEnv struct {
	r         *Run
	data, out string
	srcAddr   string // the source server's fixed address (restarted on it)
	src       *childProc
	relayURL  string
	rl        *wan.Relay
	dst, svc  string
	fast      string // the destination's directory for small files (/fast)
	dstP      *childProc
	svcP      *childProc
	cfg       wan.Config
}

// cpu is the CPU time so far of the source, the destination, the
// service and this process (the relay, mostly), in that order.
func (e *transfersEnv) cpu() [4]time.Duration {
	var out [4]time.Duration
	for i, p := range []*childProc{e.src, e.dstP, e.svcP} {
		if u, err := p.usage(); err == nil {
			out[i] = u.CPU
		}
	}
	if u, err := readProcUsage(os.Getpid()); err == nil {
		out[3] = u.CPU
	}
	return out
}

func runTransfers(ctx context.Context, r *Run) error {
	e := &transfersEnv{r: r, cfg: netLink(r), data: filepath.Join(r.Dir(), "data"), out: filepath.Join(r.Dir(), "out")}
	e.cfg.RTT = r.Duration("rtt")
	for _, d := range []string{filepath.Join(e.data, "small"), filepath.Join(e.data, "large"), e.out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	small, smallSize := r.Int("small"), r.Size("small_size")
	large, largeSize := r.Int("large"), r.Size("large_size")
	phases := map[string]bool{}
	for _, p := range fields(r.Str("phases")) {
		if p != "small" && p != "api" && p != "large" && p != "cluster" {
			return fmt.Errorf("phases: %q: want small, api, large or cluster: %w", p, ErrUsage)
		}
		phases[p] = true
	}
	smallFiles, largeFiles := small, large
	if !phases["small"] && !phases["api"] {
		smallFiles = 0
	}
	if !phases["large"] {
		largeFiles = 0
	}
	if err := transfersFiles(e.data, smallFiles, smallSize, largeFiles, largeSize); err != nil {
		return err
	}
	port, err := xrdpeer.FreePort()
	if err != nil {
		return err
	}
	e.srcAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := e.startSource(ctx); err != nil {
		return err
	}
	var raddr string
	if e.rl, raddr, err = r.Relay(ctx, e.cfg, e.srcAddr); err != nil {
		return err
	}
	e.relayURL = "http://" + raddr
	fast, err := e.smallDir(r.Str("small_dest"))
	if err != nil {
		return err
	}
	e.fast = fast
	dst, err := r.startChild(ctx, "wanda-destination", "serving", "server", "--export", "/out="+e.out, "--export", "/fast="+fast,
		"--listen", "127.0.0.1:0", "--log-format", "json", "--tpc-allow", "127.0.0.0/8")
	if err != nil {
		return err
	}
	e.dst, e.dstP = dst.URL, dst
	svc, err := r.startChild(ctx, "wanda-transfer", "serving", "transfer", "serve", "--listen", "127.0.0.1:0",
		"--db", "sqlite:"+filepath.Join(r.Dir(), "transfer.db"), "--log-format", "json", "--max-active", "256",
		"--link-max", strconv.Itoa(r.Int("link_max")), "--optimizer-interval", "2s", "--allow", "127.0.0.0/8")
	if err != nil {
		return err
	}
	e.svc, e.svcP = svc.URL, svc
	r.Note("sites: a wanda server behind the relay (source) and one on loopback (destination, `--tpc-allow 127.0.0.0/8`); the service: `wanda transfer serve --db sqlite:... --max-active 256 --link-max %d --optimizer-interval 2s`", r.Int("link_max"))

	var jobs []transfer.SubmitRequest
	per := max(1, small/10)
	for i := 0; i < small; i += per {
		var req transfer.SubmitRequest
		for k := i; k < min(small, i+per); k++ {
			req.Files = append(req.Files, e.file("small", k))
		}
		req.Params = store.Params{Retry: 5, RetryDelay: 1}
		jobs = append(jobs, req)
	}
	if phases["small"] {
		if err := e.phase(ctx, "small files", e.apiPath(), jobs, int64(small)*smallSize, 0); err != nil {
			return err
		}
	}
	if phases["api"] {
		if err := e.pathPhases(ctx, small, smallSize); err != nil {
			return err
		}
	}
	if phases["small"] {
		if err := e.diskCeiling(min(small, 2000), smallSize); err != nil {
			return err
		}
	}
	var big transfer.SubmitRequest
	for k := range large {
		big.Files = append(big.Files, e.file("large", k))
	}
	big.Params = store.Params{Retry: 20, RetryDelay: 2}
	if phases["large"] {
		if err := e.phase(ctx, "large files", e.apiPath(), []transfer.SubmitRequest{big}, int64(large)*largeSize, r.Duration("down")); err != nil {
			return err
		}
	}
	if phases["cluster"] {
		if err := e.clusterPhase(ctx); err != nil {
			return err
		}
	}
	r.Summary(transfersSummary(r.Rows()) + transfersAPISummary(r.Rows()) + clusterSummary(r.Rows()))
	if !phases["small"] && !phases["api"] && !phases["large"] {
		return nil // the cluster phase alone: its own plot
	}
	r.SeedTable(transfersSeed(e.cfg.RTT, small, smallSize, netLinkMBs(e.cfg)))
	r.Plot(PlotSpec{Name: "transfers-rate", Title: "link rate (MB/s) over time", X: "t_s", Y: "rate_mb_s", Group: []string{"phase"},
		XLabel: "seconds since the phase's first submission", YLabel: "MB/s", Where: func(row Row) bool { return row.Get("kind") == "sample" }})
	r.Plot(PlotSpec{Name: "transfers-limit", Title: "the optimizer's limit and the active transfers", X: "t_s", Y: "limit", Group: []string{"phase"},
		XLabel: "seconds since the phase's first submission", YLabel: "active-transfer limit", Where: func(row Row) bool { return row.Get("kind") == "sample" }})
	return nil
}

// transfersFiles writes the small files and one large one, hard-linked.
func transfersFiles(data string, small int, smallSize int64, large int, largeSize int64) error {
	buf := make([]byte, smallSize)
	for i := range small {
		for k := range buf {
			buf[k] = byte(i*31 + k*7)
		}
		if err := os.WriteFile(filepath.Join(data, "small", fmt.Sprintf("f%05d", i)), buf, 0o644); err != nil {
			return err
		}
	}
	if large <= 0 {
		return nil
	}
	one := filepath.Join(data, "large", "f00")
	if err := netRandomFile(one, largeSize); err != nil {
		return err
	}
	for i := 1; i < large; i++ {
		p := filepath.Join(data, "large", fmt.Sprintf("f%02d", i))
		os.Remove(p)
		if err := os.Link(one, p); err != nil {
			return err
		}
	}
	return nil
}

func (e *transfersEnv) file(kind string, i int) transfer.FileRequest {
	name := fmt.Sprintf("f%05d", i)
	if kind == "large" {
		name = fmt.Sprintf("f%02d", i)
	}
	prefix := "/out/"
	if kind == "small" {
		prefix = "/fast/"
	}
	return transfer.FileRequest{Sources: []string{e.relayURL + "/store/" + kind + "/" + name},
		Destinations: []string{e.dst + prefix + kind + "/" + name}}
}

func (e *transfersEnv) startSource(ctx context.Context) error {
	p, err := e.r.startChild(ctx, "wanda-source", "serving", "server", "--export", "/store="+e.data,
		"--listen", e.srcAddr, "--log-format", "json")
	e.src = p
	return err
}

// phase submits jobs by path, samples the link and the optimizer every
// second, takes the source down for down (from a third of the ideal time
// on), and waits for every job to end.
func (e *transfersEnv) phase(ctx context.Context, name string, path transfersPath, jobs []transfer.SubmitRequest, bytes int64, down time.Duration) error {
	r := e.r
	r.Step(name, 1, 1)
	ideal := float64(bytes)/(netLinkMBs(e.cfg)*1e6) + 3*e.cfg.RTT.Seconds()
	t0 := time.Now()
	st0 := e.rl.Stats()
	cpu0 := e.cpu()
	var ids []string
	for _, j := range jobs {
		id, err := path.submit(ctx, j)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	killAt := t0.Add(time.Duration(ideal / 3 * float64(time.Second)))
	killed, restarted := false, down <= 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// The end is looked for every 100 ms (one list of the open jobs), so
	// that the phase's time is not rounded up to the sampling second.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	last, lastT := st0.Down, t0
	polled := t0
	deadline := t0.Add(time.Duration(20*ideal*float64(time.Second)) + 5*time.Minute + down)
	for {
		open, err := path.open(ctx, ids)
		if err != nil {
			return err
		}
		if !open {
			secs := time.Since(t0).Seconds()
			states, err := path.states(ctx, ids)
			if err != nil {
				return err
			}
			finished := states[store.FileFinished]
			total := 0
			for _, n := range states {
				total += n
			}
			st, cpu := e.rl.Stats(), e.cpu()
			ms := func(i int) float64 {
				return netRound(float64((cpu[i]-cpu0[i]).Microseconds())/1e3/float64(max(total, 1)), 3)
			}
			r.Row("kind", "phase", "phase", name, "path", path.name, "files", total, "finished", finished, "bytes", bytes,
				"connections", st.Total-st0.Total, "late", st.Late-st0.Late,
				"cpu_ms_per_file_source", ms(0), "cpu_ms_per_file_destination", ms(1), "cpu_ms_per_file_service", ms(2), "cpu_ms_per_file_relay", ms(3),
				"seconds", netRound(secs, 2), "ideal_s", netRound(ideal, 2), "of_ideal", netRound(secs/ideal, 3),
				"down_s", down.Seconds())
			return nil
		}
		if time.Now().After(deadline) {
			states, _ := path.states(ctx, ids)
			return fmt.Errorf("%s: jobs not done after %v: %v", name, time.Since(t0).Round(time.Second), states)
		}
		if !killed && down > 0 && time.Now().After(killAt) {
			_ = e.src.cmd.Process.Signal(syscall.SIGKILL)
			<-e.src.done
			killed = true
			r.Note("%s: the source server was killed %.1f s after the first submission and started again %v later", name, time.Since(t0).Seconds(), down)
		}
		if killed && !restarted && time.Since(killAt) >= down {
			if err := e.startSource(ctx); err != nil {
				return err
			}
			restarted = true
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-poll.C:
		case now := <-tick.C:
			if path.poll != nil && now.Sub(polled) >= path.pollEvery {
				if err := path.poll(ctx, ids); err != nil {
					return err
				}
				polled = now
			}
			st := e.rl.Stats()
			limit, active := e.link(ctx)
			r.Row("kind", "sample", "phase", name, "t_s", netRound(now.Sub(t0).Seconds(), 1),
				"rate_mb_s", netRound(float64(st.Down-last)/1e6/now.Sub(lastT).Seconds(), 1), "limit", limit, "active", active)
			last, lastT = st.Down, now
		}
	}
}

func (e *transfersEnv) submit(ctx context.Context, req transfer.SubmitRequest) (string, error) {
	return submitJob(ctx, e.svc, req)
}

// submitJob submits req to the service at base and returns the job's id.
func submitJob(ctx context.Context, base string, req transfer.SubmitRequest) (string, error) {
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/jobs", bytes.NewReader(b))
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var m struct {
		ID    string `json:"job_id"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || m.ID == "" {
		return "", fmt.Errorf("submit: %s %v %s", resp.Status, err, m.Error)
	}
	return m.ID, nil
}

// open reports whether any of the jobs is still open (SUBMITTED or
// ACTIVE), with one list call.
func (e *transfersEnv) open(ctx context.Context, ids []string) (bool, error) {
	hr, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.svc+"/api/v1/jobs?state=SUBMITTED,ACTIVE&limit=10000", nil)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var l struct{ Jobs []store.Job }
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return false, fmt.Errorf("listing the open jobs: %s: %w", resp.Status, err)
	}
	for _, j := range l.Jobs {
		if slices.Contains(ids, j.ID) {
			return true, nil
		}
	}
	return false, nil
}

// states sums the jobs' files by state.
func (e *transfersEnv) states(ctx context.Context, ids []string) (map[store.FileState]int, error) {
	sum := map[store.FileState]int{}
	for _, id := range ids {
		hr, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.svc+"/api/v1/jobs/"+id, nil)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			return nil, err
		}
		var j store.Job
		err = json.NewDecoder(resp.Body).Decode(&j)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		for s, n := range j.Files {
			sum[s] += n
		}
	}
	return sum, nil
}

// link is the optimizer's limit and the active transfers of the link.
func (e *transfersEnv) link(ctx context.Context) (limit, active int) {
	hr, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.svc+"/api/v1/links", nil)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	var l struct{ Links []transfer.LinkInfo }
	if json.NewDecoder(resp.Body).Decode(&l) != nil {
		return 0, 0
	}
	for _, li := range l.Links {
		if strings.HasPrefix(li.Link, strings.TrimPrefix(e.relayURL, "http://")) {
			return li.Limit, li.Active
		}
	}
	return 0, 0
}

func transfersSummary(rows []Row) string {
	if !slices.ContainsFunc(rows, func(row Row) bool { return row.Get("kind") == "phase" }) {
		return "" // the cluster phase alone
	}
	var b strings.Builder
	b.WriteString("| phase | files | finished | MB | seconds | ideal s | of the ideal | goal | CPU ms per file: source / destination / service / relay | CPU floor s |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		if row.Get("kind") != "phase" {
			continue
		}
		of, _ := toFloat(row.Get("of_ideal"))
		files, _ := toFloat(row.Get("files"))
		fin, _ := toFloat(row.Get("finished"))
		mb, _ := toFloat(row.Get("bytes"))
		verdict := "met"
		if of > transfersGoal || fin != files {
			verdict = "NOT met"
		}
		var cpu [4]float64
		for i, k := range []string{"source", "destination", "service", "relay"} {
			cpu[i], _ = toFloat(row.Get("cpu_ms_per_file_" + k))
		}
		floor := files * (cpu[0] + cpu[1] + cpu[2] + cpu[3]) / 1e3 / float64(runtime.NumCPU())
		fmt.Fprintf(&b, "| %v | %.0f | %.0f | %.0f | %v | %v | %.2f | <= %.1fx, all finished: %s | %.3f / %.3f / %.3f / %.3f | %.1f |\n",
			row.Get("phase"), files, fin, mb/1e6, row.Get("seconds"), row.Get("ideal_s"), of, transfersGoal, verdict,
			cpu[0], cpu[1], cpu[2], cpu[3], floor)
	}
	b.WriteString("\nThe CPU floor is the phase's CPU time (all four processes) over this machine's cores: no run on these cores can be faster.\n")
	for _, row := range rows {
		if row.Get("kind") == "disk" {
			fmt.Fprintf(&b, "\nThis machine's disk takes %v small files/s written as uploads write them (create, write, fsync, rename, fsync the directory; 16 at a time).\n", row.Get("files_per_s"))
		}
	}
	return b.String()
}

// smallDir is where the destination writes the small files: a fresh
// directory on tmpfs, or beside the large ones on disk.
func (e *transfersEnv) smallDir(where string) (string, error) {
	switch where {
	case "disk":
		d := filepath.Join(e.r.Dir(), "fast")
		return d, os.MkdirAll(d, 0o755)
	case "tmpfs":
		d, err := os.MkdirTemp("/dev/shm", "wanda-bench-transfers-")
		if err != nil {
			return "", fmt.Errorf("small_dest=tmpfs: %w (use --set small_dest=disk)", err)
		}
		e.r.Cleanup(func() { os.RemoveAll(d) })
		e.r.Note("the destination writes the small files on tmpfs (%s): this machine's disk creates files at a rate of its own, measured below (`--set small_dest=disk` writes them there)", d)
		return d, nil
	}
	return "", fmt.Errorf("small_dest %q: want tmpfs or disk: %w", where, ErrUsage)
}

// diskCeiling measures how many small files per second the disk under
// the results takes as a wanda upload writes them (create a temp file,
// write, fsync, rename, fsync the directory), 16 at a time: the rate no
// transfer to a server on that disk can pass.
func (e *transfersEnv) diskCeiling(n int, size int64) error {
	dir, err := os.MkdirTemp(e.r.Dir(), "ceiling-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	buf := make([]byte, size)
	work := make(chan int)
	errs := make(chan error, 16)
	t0 := time.Now()
	for range 16 {
		go func() {
			var err error
			for i := range work {
				if err == nil {
					err = writeDurably(dir, fmt.Sprintf("f%05d", i), buf)
				}
			}
			errs <- err
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	for range 16 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("disk ceiling: %w", err)
	}
	secs := time.Since(t0).Seconds()
	e.r.Row("kind", "disk", "phase", "disk small-file ceiling", "files", n, "bytes", int64(n)*size, "seconds", netRound(secs, 2),
		"files_per_s", netRound(float64(n)/secs, 0))
	return nil
}

// writeDurably writes one file as an upload does.
func writeDurably(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, "."+name+".part")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	return err
}

// transfersSeed is seed 001's small-file points: what its movers would
// take for the small-file phase on this run's path.
func transfersSeed(rtt time.Duration, n int, size int64, linkMBs float64) string {
	wire := float64(int64(n)*size) / (linkMBs * 1e6)
	one := func(perRTT float64) string {
		secs := max(float64(n)*rtt.Seconds()/perRTT, wire)
		return fmt.Sprintf("%.0f s (%.0f files/s)", secs, float64(n)/secs)
	}
	return fmt.Sprintf(`Seed 001 (FNAL/IIT on the ANI 100G testbed, 53 ms between NERSC and ANL) names the "lots of small files" problem without small-file figures: GridFTP "no pipelining for individual files" pays "one RTT delay between successive files", Globus Online has a "high control channel latency", SRM "no data channel caching"; its large-file tuning was 4 parallel streams and 4 concurrent connections. On this run's path (%v, %d files of %d KiB):

| mover | what limits it | %d files take |
|---|---|---|
| one file at a time, one RTT each (GridFTP without pipelining) | 1 file per RTT | %s |
| 4 concurrent connections (seed 001's setting) | 4 files per RTT | %s |
| the link alone (the ideal's first term) | %.0f MB/s | %.1f s |
`, rtt, n, size>>10, n, one(1), one(4), linkMBs, wire)
}

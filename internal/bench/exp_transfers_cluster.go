package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/adler32"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtemp"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// The transfers experiment's cluster phase (issue 29): `wanda transfer
// serve` instances, real processes of this binary, share one PostgreSQL
// (the distribution's, started as the tests start it: pgtemp.Launch) and
// move cluster_small small files and cluster_large large ones at once
// from the source behind the relay to the destination. The same work is
// run with each of cluster_instances instances without kills (the claim
// rate of each: claims over the time from the first to the last), and
// with the most instances while one of them, in turn, is SIGKILLed and
// started again on its address every kill_every. Each run has a fresh
// database and fresh destination directories; its end is seen in the
// database (no instance need be alive to see it). Afterwards every
// destination file is read back: its size and adler32 against the
// source's. A false failure is a FAILED file whose destination holds
// the source's bytes.

// clusterGoal is issue 29's: the run with kills within this factor of
// the same run without.
const clusterGoal = 1.3

// clusterJobFiles is the small files per job (Rucio's bulk is 200;
// larger jobs keep 100,000 files to a hundred submissions).
const clusterJobFiles = 1000

// clusterRun is one run of the phase.
type clusterRun struct {
	n         int // its place, for names
	instances int
	kills     bool
}

func (c clusterRun) String() string {
	s := fmt.Sprintf("%d instance", c.instances)
	if c.instances > 1 {
		s += "s"
	}
	if c.kills {
		s += ", kills"
	}
	return s
}

// clusterEnv is the phase's files and database server.
type clusterEnv struct {
	*transfersEnv
	dsn        string
	small      int
	smallSize  int64
	smallSums  []uint32
	large      int
	largeSize  int64
	largeSum   uint32
	killEvery  time.Duration
	serveFlags []string
	nruns      int
}

func (e *transfersEnv) clusterPhase(ctx context.Context) error {
	r := e.r
	c := &clusterEnv{transfersEnv: e, small: r.Int("cluster_small"), smallSize: r.Size("small_size"),
		large: r.Int("cluster_large"), largeSize: r.Size("cluster_large_size"), killEvery: r.Duration("kill_every")}
	instances := r.Ints("cluster_instances")
	if c.small+c.large <= 0 || len(instances) == 0 {
		return nil
	}
	if slices.Min(instances) < 1 || c.killEvery <= 0 {
		return fmt.Errorf("cluster_instances %v, kill_every %v: want instances >= 1, a period > 0: %w", instances, c.killEvery, ErrUsage)
	}
	dsn, stop, err := pgtemp.Launch(ctx)
	if errors.Is(err, pgtemp.ErrMissing) {
		r.Note("cluster phase skipped: %v", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster phase: PostgreSQL: %w", err)
	}
	r.Cleanup(func() { _ = stop() })
	c.dsn = dsn
	if err := c.files(); err != nil {
		return err
	}
	takeback := r.Str("restart_takeback") != "false"
	c.serveFlags = []string{"--log-format", "json", "--max-active", "256", "--link-max", strconv.Itoa(r.Int("link_max")),
		"--optimizer-interval", "2s", "--allow", "127.0.0.0/8", "--lease", r.Duration("lease").String(),
		"--restart-takeback=" + strconv.FormatBool(takeback)}
	r.Note("cluster phase: `wanda transfer serve --db postgres://... --listen 127.0.0.1:PORT %s` per instance (PostgreSQL %s, started as the tests start it: fsync off); %d of %d MiB in one job and %d files of %d KiB in jobs of %d, submitted at once in that order; with kills, one instance in turn is SIGKILLed every %v and started again at once on the same address",
		strings.Join(c.serveFlags, " "), pgVersion(ctx, dsn), c.large, c.largeSize>>20, c.small, c.smallSize>>10, clusterJobFiles, c.killEvery)
	var runs []clusterRun
	most := slices.Max(instances)
	for _, n := range instances {
		runs = append(runs, clusterRun{n: len(runs), instances: n})
		if n == most && !slices.ContainsFunc(runs, func(c clusterRun) bool { return c.kills }) {
			runs = append(runs, clusterRun{n: len(runs), instances: n, kills: true})
		}
	}
	c.nruns = len(runs)
	for _, run := range runs {
		if err := c.run(ctx, run); err != nil {
			return fmt.Errorf("cluster phase, %v: %w", run, err)
		}
	}
	r.Plot(PlotSpec{Name: "transfers-cluster", Title: "files finished over time, several instances on one PostgreSQL", X: "t_s", Y: "finished", Group: []string{"run"},
		XLabel: "seconds since the first submission", YLabel: "files FINISHED", Where: func(row Row) bool { return row.Get("kind") == "cluster-sample" }})
	return nil
}

// files writes the phase's sources under data/cluster (small files of
// their own content, large ones hard links of one random file) and
// keeps their adler32.
func (c *clusterEnv) files() error {
	dir := filepath.Join(c.data, "cluster")
	for _, d := range []string{filepath.Join(dir, "small"), filepath.Join(dir, "large")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	buf := make([]byte, c.smallSize)
	c.smallSums = make([]uint32, c.small)
	for i := range c.small {
		for k := range buf {
			buf[k] = byte(i*131 + k*3 + i>>8)
		}
		c.smallSums[i] = adler32.Checksum(buf)
		if err := os.WriteFile(filepath.Join(dir, "small", fmt.Sprintf("f%06d", i)), buf, 0o644); err != nil {
			return err
		}
	}
	if c.large == 0 {
		return nil
	}
	one := filepath.Join(dir, "large", "f00")
	if err := netRandomFile(one, c.largeSize); err != nil {
		return err
	}
	sum, size, err := fileSum(one)
	if err != nil {
		return err
	}
	if size != c.largeSize {
		return fmt.Errorf("%s: %d bytes, want %d", one, size, c.largeSize)
	}
	c.largeSum = sum
	for i := 1; i < c.large; i++ {
		p := filepath.Join(dir, "large", fmt.Sprintf("f%02d", i))
		os.Remove(p)
		if err := os.Link(one, p); err != nil {
			return err
		}
	}
	return nil
}

// fileSum is a file's adler32 and size.
func fileSum(path string) (uint32, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := adler32.New()
	n, err := io.Copy(h, f)
	return h.Sum32(), n, err
}

// dests are a run's destination directories: small files on the fast
// export, large ones on disk.
func (c *clusterEnv) dests(run clusterRun) (small, large string) {
	d := fmt.Sprintf("cluster%d", run.n)
	return filepath.Join(c.fast, d), filepath.Join(c.out, d)
}

// jobs are a run's submissions: the large files in one job, first,
// then the small files in jobs of clusterJobFiles. Claims take the
// oldest job's files first: the large files submitted last started only
// once every small file had been claimed, and then ran alone at the end
// of the run (10 s of 63 for 20 of 64 MiB), where a kill cut a third of
// them with nothing else left to do. First, they share the link with the
// small files, as a queue of mixed jobs does.
func (c *clusterEnv) jobs(run clusterRun) []transfer.SubmitRequest {
	d := fmt.Sprintf("cluster%d", run.n)
	var out []transfer.SubmitRequest
	if c.large > 0 {
		req := transfer.SubmitRequest{Params: store.Params{Retry: 20, RetryDelay: 2}}
		for k := range c.large {
			req.Files = append(req.Files, transfer.FileRequest{Sources: []string{fmt.Sprintf("%s/store/cluster/large/f%02d", c.relayURL, k)},
				Destinations: []string{fmt.Sprintf("%s/out/%s/f%02d", c.dst, d, k)}})
		}
		out = append(out, req)
	}
	for i := 0; i < c.small; i += clusterJobFiles {
		req := transfer.SubmitRequest{Params: store.Params{Retry: 5, RetryDelay: 1}}
		for k := i; k < min(c.small, i+clusterJobFiles); k++ {
			req.Files = append(req.Files, transfer.FileRequest{Sources: []string{fmt.Sprintf("%s/store/cluster/small/f%06d", c.relayURL, k)},
				Destinations: []string{fmt.Sprintf("%s/fast/%s/f%06d", c.dst, d, k)}})
		}
		out = append(out, req)
	}
	return out
}

// instance is one instance of a run: its fixed address and its current
// process (a new one after each kill).
type instance struct {
	addr  string
	p     *childProc
	lives int
}

// run runs the phase once: instances started, the jobs submitted to the
// first, kills if asked, the end seen in the database; then the files
// checked and the run's directories removed.
func (c *clusterEnv) run(ctx context.Context, run clusterRun) error {
	r := c.r
	r.Step("cluster: "+run.String(), run.n+1, c.nruns)
	dsn, err := pgtemp.CreateDatabase(ctx, c.dsn, fmt.Sprintf("cluster%d", run.n))
	if err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	insts := make([]*instance, run.instances)
	for i := range insts {
		port, err := xrdpeer.FreePort()
		if err != nil {
			return err
		}
		insts[i] = &instance{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		if err := c.start(ctx, run, i, insts[i], dsn); err != nil {
			return err
		}
	}
	defer func() {
		for _, in := range insts {
			if in != nil && in.p != nil {
				in.p.stop()
			}
		}
	}()

	t0 := time.Now()
	for _, j := range c.jobs(run) {
		if _, err := submitJob(ctx, insts[0].p.URL, j); err != nil {
			return err
		}
	}
	submitted := time.Since(t0)
	total := c.small + c.large
	ideal := float64(int64(c.small)*c.smallSize+int64(c.large)*c.largeSize) / (netLinkMBs(c.cfg) * 1e6)
	kills, restart, err := c.await(ctx, run, db, insts, dsn, t0, t0.Add(10*time.Minute+time.Duration(30*ideal*float64(time.Second))))
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	for _, in := range insts {
		in.p.stop()
	}
	st, err := c.tally(ctx, db, run)
	if err != nil {
		return err
	}
	meanRestart := 0.0
	if kills > 0 {
		meanRestart = restart.Seconds() / float64(kills)
	}
	r.Row("kind", "cluster", "run", run.String(), "instances", run.instances, "kills", kills, "files", total,
		"finished", st.finished, "failed", st.failed, "false_failures", st.falseFailures, "right_bytes", st.right,
		"found", st.found, "takeovers", st.takeovers, "claims", st.claims, "claims_per_s", netRound(st.claimRate, 0),
		"seconds", netRound(secs, 2), "submit_s", netRound(submitted.Seconds(), 2), "ideal_s", netRound(ideal, 2),
		"restart_s", netRound(meanRestart, 3), "failures", st.reasons)
	small, large := c.dests(run)
	os.RemoveAll(small)
	os.RemoveAll(large)
	return nil
}

// await waits until every job of run has ended (or deadline passes),
// killing an instance every killEvery (run.kills) and starting it again,
// and records a sample of the files each second. It returns the kills
// and the time their restarts took.
func (c *clusterEnv) await(ctx context.Context, run clusterRun, db *pgx.Conn, insts []*instance, dsn string, t0, deadline time.Time) (kills int, restart time.Duration, err error) {
	r := c.r
	nextKill := t0.Add(c.killEvery)
	sample := time.NewTicker(time.Second)
	defer sample.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		var open int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state NOT IN ('FINISHED', 'FINISHEDDIRTY', 'FAILED', 'CANCELED')`).Scan(&open); err != nil {
			return kills, restart, err
		}
		if open == 0 {
			break
		}
		now := time.Now()
		if now.After(deadline) {
			return kills, restart, fmt.Errorf("jobs not done after %v: %d open", now.Sub(t0).Round(time.Second), open)
		}
		if run.kills && now.After(nextKill) {
			in := insts[kills%len(insts)]
			k0 := time.Now()
			_ = in.p.cmd.Process.Signal(syscall.SIGKILL)
			<-in.p.done
			if err := c.start(ctx, run, kills%len(insts), in, dsn); err != nil {
				return kills, restart, err
			}
			restart += time.Since(k0)
			kills++
			nextKill = k0.Add(c.killEvery) // from this kill: no catching up after a slow restart
		}
		select {
		case <-ctx.Done():
			return kills, restart, context.Cause(ctx)
		case <-poll.C:
		case now := <-sample.C:
			var fin, active int
			if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'FINISHED'), count(*) FILTER (WHERE state = 'ACTIVE') FROM files`).Scan(&fin, &active); err != nil {
				return kills, restart, err
			}
			r.Row("kind", "cluster-sample", "run", run.String(), "t_s", netRound(now.Sub(t0).Seconds(), 1), "finished", fin, "active", active)
		}
	}
	return kills, restart, nil
}

// start starts (or starts again) instance i of run on its address.
func (c *clusterEnv) start(ctx context.Context, run clusterRun, i int, in *instance, dsn string) error {
	args := append([]string{"transfer", "serve", "--listen", in.addr, "--db", dsn}, c.serveFlags...)
	p, err := c.r.startChild(ctx, fmt.Sprintf("cluster%d-transfer%d-%d", run.n, i, in.lives), "serving", args...)
	if err != nil {
		return err
	}
	in.p = p
	in.lives++
	return nil
}

// clusterTally is what a run left: the files' states from the database,
// the destinations read back.
type clusterTally struct {
	finished, failed, falseFailures, right int
	found, takeovers, claims               int
	claimRate                              float64
	reasons                                string // the failures' first reasons
}

func (c *clusterEnv) tally(ctx context.Context, db *pgx.Conn, run clusterRun) (clusterTally, error) {
	var t clusterTally
	var first, last *time.Time
	err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'FINISHED'), count(*) FILTER (WHERE state = 'FAILED'),
			count(*) FILTER (WHERE mode = 'found') FROM files`).Scan(&t.finished, &t.failed, &t.found)
	if err == nil {
		err = db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE error_class = $1), min(started), max(started) FROM attempts`,
			store.ClassLeaseExpired).Scan(&t.claims, &t.takeovers, &first, &last)
	}
	if err != nil {
		return t, err
	}
	if first != nil && last != nil && last.After(*first) {
		t.claimRate = float64(t.claims) / last.Sub(*first).Seconds()
	}
	failed := map[string]string{}
	rows, err := db.Query(ctx, `SELECT destination, reason FROM files WHERE state = 'FAILED' ORDER BY job_id, idx`)
	if err != nil {
		return t, err
	}
	for rows.Next() {
		var d, reason string
		if err := rows.Scan(&d, &reason); err != nil {
			rows.Close()
			return t, err
		}
		failed[filepath.Base(d)] = reason
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return t, err
	}
	var reasons []string
	small, large := c.dests(run)
	check := func(path string, size int64, sum uint32) {
		got, n, err := fileSum(path)
		ok := err == nil && n == size && got == sum
		if ok {
			t.right++
		}
		if reason, bad := failed[filepath.Base(path)]; bad {
			if ok {
				t.falseFailures++
			}
			if len(reasons) < 3 {
				reasons = append(reasons, filepath.Base(path)+": "+reason)
			}
		}
	}
	for i := range c.small {
		check(filepath.Join(small, fmt.Sprintf("f%06d", i)), c.smallSize, c.smallSums[i])
	}
	for i := range c.large {
		check(filepath.Join(large, fmt.Sprintf("f%02d", i)), c.largeSize, c.largeSum)
	}
	t.reasons = strings.Join(reasons, "; ")
	return t, nil
}

// pgVersion is the server's version, for the notes.
func pgVersion(ctx context.Context, dsn string) string {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "?"
	}
	defer conn.Close(ctx)
	var v string
	if conn.QueryRow(ctx, `SHOW server_version`).Scan(&v) != nil {
		return "?"
	}
	return v
}

// clusterSummary is the cluster phase's table and verdicts.
func clusterSummary(rows []Row) string {
	var runs []Row
	for _, row := range rows {
		if row.Get("kind") == "cluster" {
			runs = append(runs, row)
		}
	}
	if len(runs) == 0 {
		return ""
	}
	num := func(row Row, col string) float64 { v, _ := toFloat(row.Get(col)); return v }
	var b strings.Builder
	b.WriteString("\n| run | kills | files | FINISHED | right bytes | FAILED | false failures (goal 0) | found complete | takeovers | claims/s | seconds | mean restart s |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var killed, calm float64
	var killInst float64
	for _, row := range runs {
		fmt.Fprintf(&b, "| %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v | %v |\n", row.Get("run"), row.Get("kills"), row.Get("files"),
			row.Get("finished"), row.Get("right_bytes"), row.Get("failed"), row.Get("false_failures"), row.Get("found"),
			row.Get("takeovers"), row.Get("claims_per_s"), row.Get("seconds"), row.Get("restart_s"))
		if num(row, "kills") > 0 {
			killed, killInst = num(row, "seconds"), num(row, "instances")
		}
	}
	for _, row := range runs {
		if num(row, "kills") == 0 && num(row, "instances") == killInst {
			calm = num(row, "seconds")
		}
	}
	allGood := true
	for _, row := range runs {
		if num(row, "finished") != num(row, "files") || num(row, "right_bytes") != num(row, "files") || num(row, "false_failures") != 0 {
			allGood = false
		}
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	fmt.Fprintf(&b, "\nEvery file FINISHED with the source's size and adler32 at the destination, no false failure: **%s**.\n", verdict(allGood))
	if killed > 0 && calm > 0 {
		fmt.Fprintf(&b, "With kills / without (%g instances): %.2f s / %.2f s = **%.2f (goal <= %.1f): %s**.\n", killInst, killed, calm, killed/calm, clusterGoal, verdict(killed/calm <= clusterGoal))
	}
	for _, row := range runs {
		if reasons, _ := row.Get("failures").(string); reasons != "" {
			fmt.Fprintf(&b, "\n%v: failures: %s\n", row.Get("run"), reasons)
		}
	}
	return b.String()
}

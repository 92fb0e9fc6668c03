package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/wan"
)

// The iozone experiment (seed 002, Fig. 3): sequential and random reads
// against record length, through the client library against a wanda
// server — on loopback and behind an emulated WAN — beside the same
// access pattern on a local file (and fio when installed).
//
// Every remote read is one File.ReadAt of one record, that is one HTTP
// range request: what Lustre over the WAN did for IOzone's uncached
// reads, one RPC per record (less its client read-ahead, which is why
// seqread-ra is measured too). A remote point does at most maxops reads
// so that 4 KiB random reads at 20 ms take seconds, not an hour; MB/s is
// the bytes moved over the time they took.

func init() {
	Register(&Experiment{
		Name:  "iozone",
		Seed:  "002",
		Title: "IOzone-style sweep: sequential and random reads and writes vs record length, local and over the WAN",
		Doc: "Reads a file record by record (one File.ReadAt, i.e. one HTTP range request, per record) " +
			"in order (seqread) and in a fixed-seed random order (randread) for each record length, " +
			"through the client library against an in-process wanda server, directly on loopback " +
			"(wanda-0ms) and through a `wanda wan` relay at each RTT (wanda-<rtt>ms); seqread-ra reads " +
			"the whole file through the client's read-ahead (File.Reader); seqwrite is an upload of the " +
			"file (Client.Copy). The local reference runs the same patterns with pread/pwrite on a local " +
			"file (page-cache figures) and with fio when installed. Seed 002 found sequential I/O flat " +
			"across record lengths near the link's rate and random reads collapsing below 2 MB records " +
			"over a 16 ms, 1 Gb/s path.",
		Params: []Param{
			{Name: "records", Help: "record lengths", Default: "4KiB 64KiB 256KiB 1MiB 4MiB 16MiB", Quick: "4KiB 256KiB 4MiB"},
			{Name: "size", Help: "file size", Default: "256MiB", Quick: "32MiB"},
			{Name: "rtts", Help: "RTTs of the wanda paths (0: direct loopback, no relay)", Default: "0 20"},
			{Name: "rate", Help: "emulated link rate (relayed paths)", Default: "1Gbit"},
			{Name: "window", Help: "emulated TCP window per connection (relayed paths)", Default: "4MiB"},
			{Name: "maxops", Help: "most reads per remote point (seqread reads the file's first records, randread a random sample)", Default: "1000", Quick: "200"},
			{Name: "fio-runtime", Help: "bound of one fio job", Default: "20s", Quick: "5s"},
			{Name: "mount-block", Help: "block size of wanda mount's cache", Default: "1MiB"},
			{Name: "mount-prefetch", Help: "most blocks wanda mount fetches ahead of a sequential reader (its read-ahead window grows to it)", Default: "64"},
			{Name: "mounts", Help: "filesystems measured on the same path besides the client library: wanda (wanda mount, FUSE), xrootdfs (XRootD's FUSE client over root://); empty: none", Default: "wanda xrootdfs"},
		},
		Run: runIOzone,
	})
}

const seed002IOzone = `Seed 002 (Lustre mounted over the WAN, FIU Miami → UF Gainesville: 1 GbE, RTT ≈ 16 ms, TCP buffers 13 MB; iperf ≈ 750 Mb/s), IOzone, Fig. 3:

| measure | seed 002 |
|---|---|
| sequential read, mean over record lengths | 79.2 MB/s (≈ 633 Mb/s) |
| sequential write, mean over record lengths | 90.9 MB/s (≈ 727 Mb/s) |
| sequential read/write vs record length | flat over a broad range |
| random read/write | "drop dramatically when the record lengths are below 2 MB" |
| random read, records > 4 MB | rates start to rise again |
| multi-stream (8) vs single-stream IOzone | +16.8 % sequential read, +15.6 % sequential write |

Their files were 32 GB (twice the RAM) so that nothing came from the page cache; the figure's per-record values are not given in the text.`

// ioPathName names a wanda path by its RTT.
func ioPathName(rtt time.Duration) string { return fmt.Sprintf("wanda-%dms", rtt.Milliseconds()) }

func runIOzone(ctx context.Context, r *Run) error {
	records := r.Sizes("records")
	size := r.Size("size")
	rtts := r.Durations("rtts")
	link := wan.Config{Rate: r.Rate("rate"), Window: r.Size("window"), Handshake: true}
	maxOps := r.Int("maxops")
	fioRuntime := r.Duration("fio-runtime")
	if size <= 0 || maxOps <= 0 {
		return usagef("size and maxops must be positive")
	}
	for _, rec := range records {
		if rec <= 0 || rec > size {
			return usagef("record length %d: want 1..size (%d)", rec, size)
		}
	}

	data := filepath.Join(r.Dir(), "iozone")
	src := filepath.Join(data, "file.bin")
	if err := ioRandomFile(src, size); err != nil {
		return err
	}
	base, err := r.Server(ctx, map[string]string{"/data": data})
	if err != nil {
		return err
	}
	host := strings.TrimPrefix(base, "http://")
	r.Note("local and local-fio are page-cache figures: the file was just written and caches are not dropped (that would disturb the shared machine); seed 002 used files of twice the RAM instead")
	r.Note("remote points read at most maxops=%d records each: seqread the file's first records, randread a fixed-seed random sample of them; seqread-ra reads the whole file through File.Reader (read-ahead: %s windows, depth %d)",
		maxOps, client.FormatBytes(client.DefaultReadAheadWindow), client.DefaultReadAheadDepth)
	r.Note("seqwrite over wanda is an upload of the whole file with Client.Copy (no checksum): the engine picks its own request sizes, so those rows have no record length. Random writes are not measured over wanda: HTTP has no write at an offset into an existing file (XRootD's kXR_write arrives with root://, issue 7)")

	perRep := 4 * len(records) // local: seqread randread seqwrite randwrite
	haveFio := r.Have("fio")
	if haveFio {
		perRep += 4 * len(records)
	} else {
		r.Note("fio: not installed (apt-get install fio), local-fio rows skipped")
	}
	perRep += len(rtts) * (2*len(records) + 2)
	mounters := ioMounters(r, strings.Fields(r.Str("mounts")), r.Size("mount-block"), r.Int("mount-prefetch"))
	perRep += len(rtts) * (1 + len(mounters)*ioMountSteps(records))
	if len(mounters) > 0 {
		r.Note("mount rows: pread/pwrite on a file of a FUSE mount of the same server through the same path; cold = a fresh mount (empty block cache, no page cache), warm = the same reads again on it, through a new open; writes go to a new file, record by record, and include its close (wanda mount uploads there). cp = `wanda cp` of the whole file to local disk, cat = the whole file read through the mount in 1 MiB reads, cold")
	}
	n, i := r.Reps()*perRep, 0
	step := func(point string) error {
		i++
		r.Step(point, i, n)
		return context.Cause(ctx)
	}

	for rep := 1; rep <= r.Reps(); rep++ {
		if err := ioLocal(r, rep, src, size, records, step); err != nil {
			return err
		}
		if haveFio {
			if err := ioFio(ctx, r, rep, data, size, records, fioRuntime, step); err != nil {
				return err
			}
		}
		for _, rtt := range rtts {
			addr := host
			var rl *wan.Relay
			if rtt > 0 {
				cfg := link
				cfg.RTT = rtt
				if rl, addr, err = r.Relay(ctx, cfg, host); err != nil {
					return err
				}
			}
			err := ioRemote(ctx, r, rep, "http://"+addr, ioPathName(rtt), src, size, records, maxOps, step)
			if err == nil {
				if err = step(fmt.Sprintf("rep %d %s cp", rep, ioPathName(rtt))); err == nil {
					err = ioCp(ctx, r, rep, "http://"+addr, ioPathName(rtt), size)
				}
			}
			for _, fm := range mounters {
				if err != nil {
					break
				}
				path := fmt.Sprintf("%s-%dms", fm.name, rtt.Milliseconds())
				if err = ioMount(ctx, r, rep, fm, "http://"+addr, path, size, records, maxOps, step); err != nil {
					err = fmt.Errorf("%s: %w", path, err)
				}
			}
			if rl != nil {
				rl.Close() // before the next relay starts; the cleanup closes it again, harmlessly
			}
			if err != nil {
				return fmt.Errorf("%s: %w", ioPathName(rtt), err)
			}
		}
	}
	r.Plot(PlotSpec{Name: "iozone", Title: fmt.Sprintf("%s file, record by record", client.FormatBytes(size)),
		X: "record_bytes", Y: "mb_s", Group: []string{"path", "op"}, XLabel: "record length (bytes)", YLabel: "MB/s", LogX: true})
	r.Plot(PlotSpec{Name: "iozone-remote", Title: "over wanda: reads vs record length",
		X: "record_bytes", Y: "mb_s", Group: []string{"path", "op"}, XLabel: "record length (bytes)", YLabel: "MB/s", LogX: true,
		Where: func(row Row) bool { p, _ := row.Get("path").(string); return strings.HasPrefix(p, "wanda-") }})
	if len(mounters) > 0 {
		for _, p := range ioMountPlots(rtts) {
			r.Plot(p)
		}
	}
	r.SeedTable(seed002IOzone)
	return nil
}

// ioMountPlots are the mounts' plots, one per path (as seed 002's Fig.
// 3), MB/s on a log scale: cold reads over the WAN and warm ones differ
// by 1000x.
func ioMountPlots(rtts []time.Duration) []PlotSpec {
	var out []PlotSpec
	for _, rtt := range rtts {
		suffix := fmt.Sprintf("-%dms", rtt.Milliseconds())
		what := fmt.Sprintf("%d ms RTT", rtt.Milliseconds())
		if rtt == 0 {
			what = "loopback"
		}
		out = append(out, PlotSpec{Name: "iozone-mount" + suffix, Title: "on a mount, " + what + ": reads and writes vs record length",
			X: "record_bytes", Y: "mb_s", Group: []string{"path", "op", "cache"}, XLabel: "record length (bytes)", YLabel: "MB/s (log)", LogX: true, LogY: true,
			Where: func(row Row) bool {
				p, _ := row.Get("path").(string)
				op, _ := row.Get("op").(string)
				return strings.HasSuffix(p, suffix) && (strings.HasPrefix(p, "mount-") || strings.HasPrefix(p, "xrootdfs-")) && op != "cat" ||
					p == "local" && op == "randread"
			}})
	}
	return out
}

// ioRow records one point.
func ioRow(r *Run, rep int, path, op string, rec, n int64, ops int, secs float64) {
	kv := []any{"path", path, "op", op}
	if rec > 0 {
		kv = append(kv, "record_bytes", rec)
	}
	kv = append(kv, "mb_s", ioRound(float64(n)/1e6/secs, 3), "ops", ops, "bytes", n, "seconds", ioRound(secs, 4), "rep", rep)
	r.Row(kv...)
}

// ioPerm returns count record indexes of nrec in a fixed-seed random order
// (the same sample for every path and repetition).
// ioRead is a read pass of a sweep point: its name and the records it
// reads, in order.
type ioRead struct {
	op    string
	order []int64
}

// ioReads are a point's read passes: the first records in order, and
// records in a random order (maxOps of each at most).
func ioReads(size, rec int64, maxOps int) []ioRead {
	nrec := size / rec
	ops := int(min(nrec, int64(maxOps)))
	seq := make([]int64, ops)
	for k := range seq {
		seq[k] = int64(k)
	}
	return []ioRead{{"seqread", seq}, {"randread", ioPerm(nrec, ops, rec)}}
}

func ioPerm(nrec int64, count int, rec int64) []int64 {
	rng := rand.New(rand.NewPCG(2, uint64(rec)))
	p := make([]int64, nrec)
	for i := range p {
		p[i] = int64(i)
	}
	rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p[:min(int64(count), nrec)]
}

// ioLocal runs the patterns with pread/pwrite on local files.
func ioLocal(r *Run, rep int, src string, size int64, records []int64, step func(string) error) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	dst := filepath.Join(filepath.Dir(src), "local-write.bin")
	defer os.Remove(dst)
	for _, rec := range records {
		nrec := size / rec
		buf := make([]byte, rec)
		seq := make([]int64, nrec)
		for k := range seq {
			seq[k] = int64(k)
		}
		rnd := ioPerm(nrec, int(nrec), rec)
		for _, p := range []struct {
			op    string
			order []int64
		}{{"seqread", seq}, {"randread", rnd}} {
			if err := step(fmt.Sprintf("rep %d local %s %s", rep, p.op, client.FormatBytes(rec))); err != nil {
				return err
			}
			t0 := time.Now()
			for _, k := range p.order {
				if _, err := f.ReadAt(buf, k*rec); err != nil {
					return fmt.Errorf("local %s: %w", p.op, err)
				}
			}
			ioRow(r, rep, "local", p.op, rec, nrec*rec, int(nrec), time.Since(t0).Seconds())
		}
		w, err := os.Create(dst)
		if err != nil {
			return err
		}
		for _, p := range []struct {
			op    string
			order []int64
		}{{"seqwrite", seq}, {"randwrite", rnd}} {
			if err := step(fmt.Sprintf("rep %d local %s %s", rep, p.op, client.FormatBytes(rec))); err != nil {
				w.Close()
				return err
			}
			t0 := time.Now()
			for _, k := range p.order {
				if _, err := w.WriteAt(buf, k*rec); err != nil {
					w.Close()
					return fmt.Errorf("local %s: %w", p.op, err)
				}
			}
			ioRow(r, rep, "local", p.op, rec, nrec*rec, int(nrec), time.Since(t0).Seconds())
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	return nil
}

// ioFio runs fio's read, randread, write and randwrite on a local file.
func ioFio(ctx context.Context, r *Run, rep int, dir string, size int64, records []int64, runtime time.Duration, step func(string) error) error {
	file := filepath.Join(dir, "fio.bin")
	defer os.Remove(file)
	ops := map[string]string{"read": "seqread", "randread": "randread", "write": "seqwrite", "randwrite": "randwrite"}
	for _, rec := range records {
		for _, rw := range []string{"write", "read", "randread", "randwrite"} {
			if err := step(fmt.Sprintf("rep %d fio %s %s", rep, rw, client.FormatBytes(rec))); err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, runtime+time.Minute)
			out, err := exec.CommandContext(cctx, "fio", "--name=iozone", "--filename="+file, "--rw="+rw,
				fmt.Sprintf("--bs=%d", rec), fmt.Sprintf("--size=%d", size), "--ioengine=psync",
				fmt.Sprintf("--runtime=%ds", max(1, int(runtime.Seconds()))), "--output-format=json").Output()
			cancel()
			if err != nil {
				return fmt.Errorf("fio --rw=%s --bs=%d: %w", rw, rec, err)
			}
			bw, ios, secs, err := ioParseFio(out, rw)
			if err != nil {
				return fmt.Errorf("fio --rw=%s --bs=%d: %w", rw, rec, err)
			}
			r.Row("path", "local-fio", "op", ops[rw], "record_bytes", rec, "mb_s", ioRound(bw/1e6, 3), "ops", ios,
				"bytes", int64(bw*secs), "seconds", ioRound(secs, 4), "rep", rep)
		}
	}
	return nil
}

// ioParseFio reads the bandwidth (bytes/s), I/O count and runtime of the
// first job of fio's JSON output.
func ioParseFio(out []byte, rw string) (bw float64, ios int64, secs float64, err error) {
	// fio may print notes before the JSON document.
	if k := bytes.IndexByte(out, '{'); k > 0 {
		out = out[k:]
	}
	type side struct {
		BW       float64 `json:"bw"`       // KiB/s
		BWBytes  float64 `json:"bw_bytes"` // newer fio
		TotalIOs int64   `json:"total_ios"`
		Runtime  float64 `json:"runtime"` // ms
	}
	var doc struct {
		Jobs []struct {
			Read  side `json:"read"`
			Write side `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, 0, 0, fmt.Errorf("parsing its JSON: %w", err)
	}
	if len(doc.Jobs) == 0 {
		return 0, 0, 0, fmt.Errorf("no job in its JSON")
	}
	s := doc.Jobs[0].Read
	if strings.Contains(rw, "write") {
		s = doc.Jobs[0].Write
	}
	bw = s.BWBytes
	if bw == 0 {
		bw = s.BW * 1024
	}
	if bw <= 0 {
		return 0, 0, 0, fmt.Errorf("no bandwidth in its JSON")
	}
	return bw, s.TotalIOs, s.Runtime / 1e3, nil
}

// ioRemote runs the patterns through the client library against base.
func ioRemote(ctx context.Context, r *Run, rep int, base, path, src string, size int64, records []int64, maxOps int, step func(string) error) error {
	c := client.New()
	defer c.HTTP.Client.CloseIdleConnections()
	f, err := c.Open(ctx, base+"/data/file.bin")
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Size() != size {
		return fmt.Errorf("%s is %d bytes, want %d", f.URL(), f.Size(), size)
	}
	for _, rec := range records {
		buf := make([]byte, rec)
		for _, p := range ioReads(size, rec, maxOps) {
			if err := step(fmt.Sprintf("rep %d %s %s %s", rep, path, p.op, client.FormatBytes(rec))); err != nil {
				return err
			}
			t0 := time.Now()
			for _, k := range p.order {
				if _, err := f.ReadAt(buf, k*rec); err != nil {
					return fmt.Errorf("%s record %d of %d bytes: %w", p.op, k, rec, err)
				}
			}
			ioRow(r, rep, path, p.op, rec, int64(len(p.order))*rec, len(p.order), time.Since(t0).Seconds())
		}
	}

	// seqread-ra: the whole file through the read-ahead, at the smallest
	// record length (the one read-ahead matters most for).
	rec := records[0]
	for _, x := range records {
		rec = min(rec, x)
	}
	if err := step(fmt.Sprintf("rep %d %s seqread-ra %s", rep, path, client.FormatBytes(rec))); err != nil {
		return err
	}
	rd := f.Reader(client.ReadAheadOptions{})
	buf := make([]byte, rec)
	t0 := time.Now()
	var got int64
	var reads int
	for {
		m, err := io.ReadFull(rd, buf)
		got += int64(m)
		if m > 0 {
			reads++
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			rd.Close()
			return fmt.Errorf("seqread-ra: %w", err)
		}
	}
	secs := time.Since(t0).Seconds()
	rd.Close()
	if got != size {
		return fmt.Errorf("seqread-ra read %d bytes of %d", got, size)
	}
	ioRow(r, rep, path, "seqread-ra", rec, got, reads, secs)

	if err := step(fmt.Sprintf("rep %d %s seqwrite", rep, path)); err != nil {
		return err
	}
	dst := base + "/data/upload-" + path + ".bin"
	t0 = time.Now()
	res, err := c.Copy(ctx, []string{src}, dst, client.CopyOptions{Checksum: "none"})
	secs = time.Since(t0).Seconds()
	if err != nil {
		return fmt.Errorf("seqwrite (upload): %w", err)
	}
	streams := 0
	if len(res) > 0 {
		streams = res[0].Streams
	}
	r.Row("path", path, "op", "seqwrite", "mb_s", ioRound(float64(size)/1e6/secs, 3), "ops", 1, "bytes", size,
		"seconds", ioRound(secs, 4), "rep", rep, "streams", streams)
	_ = c.Remove(ctx, dst, false)
	return nil
}

// ioRandomFile writes size deterministic pseudo-random bytes.
func ioRandomFile(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{'i', 'o', 'z', 'o', 'n', 'e'})
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		_, _ = rng.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ioRound rounds x to d decimals.
func ioRound(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

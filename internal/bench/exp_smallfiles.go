package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

func init() {
	Register(&Experiment{
		Name:  "smallfiles",
		Seed:  "001",
		Title: "Many small files at one RTT: wanda cp -r --parallel M vs sequential curl",
		Doc: `N small files (random bytes) served by an in-process wanda server behind a wanda wan ` +
			`relay at one RTT: wanda's client library copying the directory (Client.Copy, ` +
			`recursive, M files in flight, end-to-end checksums) against a sequential curl loop ` +
			`(a new curl process per file, as scripts do; a subset is timed and scaled) and one ` +
			`curl with all URLs (one kept-alive connection, still one file at a time). Seed 001 ` +
			`calls this the lots-of-small-files problem: without pipelining every file costs at ` +
			`least one RTT. Ideal time = bytes / link rate + one RTT per batch of M files.`,
		Params: []Param{
			{Name: "files", Help: "number of files", Default: "1000", Quick: "200"},
			{Name: "file_size", Help: "size of each file", Default: "64KiB"},
			{Name: "rtt", Help: "RTT of the relay (bare numbers are ms)", Default: "50ms"},
			{Name: "rate", Help: "link rate of the relay, per direction", Default: "1Gbit"},
			{Name: "window", Help: "per-connection window of the relay", Default: "4MiB"},
			{Name: "parallel", Help: "wanda files in flight (--parallel)", Default: "1 8 64", Quick: "8 64"},
			{Name: "curl_loop", Help: "files timed in the one-curl-per-file loop (scaled to all files)", Default: "200", Quick: "20"},
			{Name: "curl", Help: "also time curl when installed: yes/no", Default: "yes"},
		},
		Run: runSmallFiles,
	})
}

func runSmallFiles(ctx context.Context, r *Run) error {
	nfiles := r.Int("files")
	fsize := r.Size("file_size")
	cfg := netLink(r)
	cfg.RTT = r.Duration("rtt")
	parallel := r.Ints("parallel")
	loopN := min(r.Int("curl_loop"), nfiles)
	wantCurl := netYes(r, "curl")
	if nfiles <= 0 || fsize < 0 {
		panic(paramError{"files", r.Str("files"), "a positive number of files"})
	}
	if loopN < 1 {
		panic(paramError{"curl_loop", r.Str("curl_loop"), "at least 1 file to time"})
	}

	data := filepath.Join(r.Dir(), "data", "small")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	r.Log().Info("generating the source files", "files", nfiles, "size", fsize)
	names := make([]string, nfiles)
	crcs := make(map[string]uint32, nfiles)
	width := len(fmt.Sprint(nfiles))
	for i := range names {
		names[i] = fmt.Sprintf("f%0*d.bin", width, i+1)
		p := filepath.Join(data, names[i])
		if err := netRandomFile(p, fsize); err != nil {
			return err
		}
		c, err := netCRC(p)
		if err != nil {
			return err
		}
		crcs[names[i]] = c
	}
	base, err := r.Server(ctx, map[string]string{"/data": filepath.Dir(data)})
	if err != nil {
		return fmt.Errorf("wanda server: %w", err)
	}
	rl, addr, err := r.Relay(ctx, cfg, strings.TrimPrefix(base, "http://"))
	if err != nil {
		return err
	}
	srcURL := "http://" + addr + "/data/small"
	haveCurl := wantCurl && r.Have("curl")
	if wantCurl && !haveCurl {
		r.Note("curl: not installed, its rows are skipped")
	}
	if haveCurl {
		r.Note("curl loop: %d of the %d files timed (a new curl process each), the time scaled to all %d", loopN, nfiles, nfiles)
	}
	r.Note("wanda copies run in-process through the client library (a fresh client per copy, no process start); curl is a process per call")

	total := int64(nfiles) * fsize
	linkS := float64(total) / 1e6 / netLinkMBs(cfg)
	ideal := func(par int) float64 {
		batches := math.Ceil(float64(nfiles) / float64(par))
		return linkS + batches*cfg.RTT.Seconds()
	}
	// bound is a generous limit for one sequential pass over every file.
	bound := time.Minute + 10*time.Duration(nfiles)*(2*cfg.RTT+time.Duration(float64(fsize)/(netLinkMBs(cfg)*1e6)*float64(time.Second))+20*time.Millisecond)
	row := func(clientName string, par, timed int, secs float64) {
		r.Row("client", clientName, "parallel", par, "files", nfiles, "timed_files", timed,
			"seconds", netRound(secs, 3), "files_s", netRound(float64(nfiles)/secs, 1),
			"mb_s", netRound(float64(total)/1e6/secs, 2), "ideal_seconds", netRound(ideal(par), 3),
			"vs_ideal", netRound(secs/ideal(par), 2))
	}

	steps := len(parallel)
	if haveCurl {
		steps += 2
	}
	n, i := steps*r.Reps(), 0
	step := func(what string, rep int) error {
		i++
		r.Step(fmt.Sprintf("%s rep=%d", what, rep+1), i, n)
		return context.Cause(ctx)
	}
	for rep := range r.Reps() {
		for _, par := range parallel {
			if err := step(fmt.Sprintf("wanda parallel=%d", par), rep); err != nil {
				return err
			}
			dst := filepath.Join(r.Dir(), "out", fmt.Sprintf("wanda-%d", par))
			os.RemoveAll(dst)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			smp := r.Sampler(fmt.Sprintf("wanda parallel=%d rep=%d", par, rep+1), netSampleEvery(r), func() int64 { return rl.Stats().Down })
			cctx, cancel := context.WithTimeout(ctx, bound)
			smp.Start()
			t0 := time.Now()
			err := netWandaCopy(cctx, []string{srcURL + "/"}, dst, client.CopyOptions{Recursive: true, Parallel: par, Checksum: "auto"})
			secs := time.Since(t0).Seconds()
			smp.Stop()
			cancel()
			if err != nil {
				return fmt.Errorf("wanda cp -r --parallel %d: %w", par, err)
			}
			if err := netVerifyDir(dst, names, fsize, crcs); err != nil {
				return fmt.Errorf("wanda cp -r --parallel %d made a wrong copy: %w", par, err)
			}
			os.RemoveAll(dst)
			row("wanda", par, nfiles, secs)
		}
		if !haveCurl {
			continue
		}

		if err := step(fmt.Sprintf("curl loop (%d files)", loopN), rep); err != nil {
			return err
		}
		dst := filepath.Join(r.Dir(), "out", "curl-loop")
		os.RemoveAll(dst)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, bound)
		t0 := time.Now()
		for _, name := range names[:loopN] {
			if err := netCmd(cctx, "curl", "-sSf", "--noproxy", "*", "-o", filepath.Join(dst, name), srcURL+"/"+name); err != nil {
				cancel()
				return fmt.Errorf("curl loop: %w", err)
			}
		}
		secs := time.Since(t0).Seconds() * float64(nfiles) / float64(loopN)
		cancel()
		if err := netVerifyDir(dst, names[:loopN], fsize, crcs); err != nil {
			return fmt.Errorf("curl loop made a wrong copy: %w", err)
		}
		os.RemoveAll(dst)
		row("curl-loop", 1, loopN, secs)

		if err := step("curl keep-alive (all URLs, one process)", rep); err != nil {
			return err
		}
		dst = filepath.Join(r.Dir(), "out", "curl-keepalive")
		os.RemoveAll(dst)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		args := []string{"-sSf", "--noproxy", "*"}
		for _, name := range names {
			args = append(args, "-o", filepath.Join(dst, name), srcURL+"/"+name)
		}
		cctx, cancel = context.WithTimeout(ctx, bound)
		t0 = time.Now()
		err := netCmd(cctx, "curl", args...)
		secs = time.Since(t0).Seconds()
		cancel()
		if err != nil {
			return fmt.Errorf("curl with all URLs: %w", err)
		}
		if err := netVerifyDir(dst, names, fsize, crcs); err != nil {
			return fmt.Errorf("curl with all URLs made a wrong copy: %w", err)
		}
		os.RemoveAll(dst)
		row("curl-keepalive", 1, nfiles, secs)
	}
	r.Plot(PlotSpec{Name: "smallfiles", Title: fmt.Sprintf("%d files of %s at RTT %v", nfiles, client.FormatBytes(fsize), cfg.RTT),
		X: "parallel", Y: "files_s", Group: []string{"client"}, XLabel: "files in flight", YLabel: "files/s", LogX: true})
	r.SeedTable(seed001Text)
	return nil
}

// seed001Text is what seed 001 says about small files (it gives no
// table of them).
const seed001Text = `Seed 001 (Fermilab/IIT, ANI 100G testbed, RTT 53 ms between NERSC and ANL) gives no small-file figures; its slides name the "lots of small files" problem: GridFTP without pipelining pays "one RTT delay between successive files", SRM has "no data channel caching", and GridFTP reached its rates on small files only with concurrency and pipelining. At 53 ms a strictly sequential client cannot exceed ~19 files/s whatever the link: that is the bar the curl rows show, and what --parallel removes.`

// netVerifyDir checks that dir holds each of names with the right size
// and CRC-32C.
func netVerifyDir(dir string, names []string, size int64, crcs map[string]uint32) error {
	for _, name := range names {
		if err := netVerify(filepath.Join(dir, name), size, crcs[name]); err != nil {
			return err
		}
	}
	return nil
}

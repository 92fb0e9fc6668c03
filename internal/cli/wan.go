package cli

import (
	"errors"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/wan"
)

func newWanCmd() *cobra.Command {
	var (
		listen, to, rateS, windowS, resetS, logLevel, logFormat string
		stallAll                                                bool
		statsEvery                                              time.Duration
	)
	cfg := wan.Default()
	cmd := &cobra.Command{
		Use:   "wan --to HOST:PORT [--listen HOST:PORT] [--rtt D] [--rate R] [--window SIZE] [flags]",
		Short: "Relay TCP through an emulated WAN path (latency, rate, window, faults), loopback only",
		Long: `Relay TCP connections to --to through an emulated wide area path, in user
space (no netem needed): RTT/2 of delay each way (with --jitter, never
reordering), the cost of the TCP handshake, one bottleneck of --rate per
direction shared by all connections, and at most --window bytes in flight
per connection and direction, so one stream gets at most window/RTT.
Faults: --stall-every/--stall-for pause forwarding, --reset-every resets
connections after so many bytes or so much time.

  wanda wan --listen 127.0.0.1:9000 --to 127.0.0.1:1094 --rtt 40ms --rate 1Gbit --window 4MiB
  curl -o /dev/null -w '%{speed_download}\n' http://127.0.0.1:9000/store/big.bin

Both addresses must be on loopback. A summary is logged every --stats-every
and at exit. See docs/wan.md.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usagef("--to is required (the upstream HOST:PORT on loopback)")
			}
			var err error
			if cfg.Rate, err = wan.ParseRate(rateS); err != nil {
				return usagef("--rate: %v", err)
			}
			if cfg.Window, err = wan.ParseSize(windowS); err != nil {
				return usagef("--window: %v", err)
			}
			if d, derr := time.ParseDuration(resetS); derr == nil {
				cfg.Reset.After = d
			} else if n, serr := wan.ParseSize(resetS); serr == nil {
				cfg.Reset.AfterBytes = n
			} else {
				return usagef("--reset-every %q: want a byte count (10MiB) or a duration (30s)", resetS)
			}
			cfg.Stall.AllConns = stallAll
			lc := config.Log{Level: logLevel, Format: logFormat}
			if err := checkLog(lc); err != nil {
				return err
			}
			log := app.NewLogger(lc, cmd.ErrOrStderr())
			cfg.Log = log

			r, err := wan.New(cfg, to)
			if err != nil {
				return usageError{err} // bad values or a non-loopback upstream
			}
			ln, err := wan.Listen(listen)
			if errors.Is(err, wan.ErrNotLoopback) {
				return usageError{err}
			} else if err != nil {
				return err
			}
			log.Info("wan relay", "listen", ln.Addr().String(), "to", to,
				"rtt", cfg.RTT, "jitter", cfg.Jitter, "rate", rateS, "window", windowS,
				"handshake", cfg.Handshake, "stall_every", cfg.Stall.Every, "stall_for", cfg.Stall.For,
				"reset_every", resetS)

			ctx := cmd.Context()
			done := make(chan struct{})
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				logStats(log, r, statsEvery, done)
			}()
			err = r.Serve(ctx, ln)
			close(done)
			<-stopped
			r.Close()
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "loopback address to accept connections on")
	f.StringVar(&to, "to", "", "upstream HOST:PORT on loopback (required)")
	f.DurationVar(&cfg.RTT, "rtt", 0, "round-trip time to add (RTT/2 each way)")
	f.DurationVar(&cfg.Jitter, "jitter", 0, "vary each one-way delay uniformly within ±jitter (bytes are never reordered)")
	f.StringVar(&rateS, "rate", "0", "bottleneck rate per direction, shared by all connections: 1Gbit, 100Mbit, 10G, 125MB/s; 0 = unlimited")
	f.DurationVar(&cfg.Queue, "queue", 0, "bottleneck buffer as queueing delay (default max(rtt, 10ms)); senders wait, nothing is dropped")
	f.StringVar(&windowS, "window", "0", "bytes in flight per connection and direction (TCP window): 4MiB, 512KiB; 0 = no window emulation")
	f.BoolVar(&cfg.Handshake, "handshake", true, "charge one RTT for the TCP handshake before the client's first byte")
	f.DurationVar(&cfg.Stall.Every, "stall-every", 0, "stop forwarding every so often (with --stall-for)")
	f.DurationVar(&cfg.Stall.For, "stall-for", 0, "how long each stall lasts")
	f.BoolVar(&stallAll, "stall-all", false, "stall all connections at once (default: each on its own clock from accept)")
	f.StringVar(&resetS, "reset-every", "0", "reset each connection (RST) after this many bytes (10MiB) or this long (30s); 0 = never")
	f.DurationVar(&statsEvery, "stats-every", 5*time.Second, "log a summary this often (0: only at exit)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}

// checkLog validates log flags the way config.Validate does for the server.
func checkLog(c config.Log) error {
	switch c.Level {
	case "debug", "info", "warn", "error":
	default:
		return usagef("--log-level %q: want debug, info, warn or error", c.Level)
	}
	switch c.Format {
	case "text", "json":
	default:
		return usagef("--log-format %q: want text or json", c.Format)
	}
	return nil
}

// logStats logs the relay's counters every interval (if > 0) until done
// is closed, then once more.
func logStats(log *slog.Logger, r *wan.Relay, every time.Duration, done <-chan struct{}) {
	start := time.Now()
	last, lastT := r.Stats(), start
	line := func(msg string, s, prev wan.Stats, d time.Duration) {
		args := []any{"conns", s.Active, "total", s.Total, "up", human(s.Up), "down", human(s.Down)}
		if msg == "wan stats" {
			args = append(args, "up_rate", rate(s.Up-prev.Up, d), "down_rate", rate(s.Down-prev.Down, d))
		} else {
			args = append(args, "uptime", d.Round(time.Millisecond))
		}
		log.Info(msg, append(args, "resets", s.Resets, "late", s.Late)...)
		if s.Late > prev.Late {
			log.Warn("relay fell behind schedule: short of CPU, the emulation is not faithful", "late_writes", s.Late-prev.Late)
		}
	}
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case now := <-tick:
			s := r.Stats()
			line("wan stats", s, last, now.Sub(lastT))
			last, lastT = s, now
		case <-done:
			line("wan done", r.Stats(), wan.Stats{}, time.Since(start))
			return
		}
	}
}

package bench

// The contract between experiments and the framework. The framework side
// (runner.go, output.go, stats.go, plot.go, report.go) implements these
// methods; experiments call nothing else.
//
//	// Parameters (parsed from Default/Quick or --set; a bad value is a
//	// usage error raised before anything starts):
//	func (r *Run) Quick() bool
//	func (r *Run) Str(name string) string
//	func (r *Run) Int(name string) int
//	func (r *Run) Ints(name string) []int            // "1 4 8 16" or "1,4,8,16"
//	func (r *Run) Duration(name string) time.Duration
//	func (r *Run) Durations(name string) []time.Duration // "0 10ms 20ms" (bare numbers are ms)
//	func (r *Run) Size(name string) int64             // "512MiB", "64K"
//	func (r *Run) Sizes(name string) []int64
//	func (r *Run) Rate(name string) int64             // bits/s: "1Gbit"
//	func (r *Run) Reps() int                          // repetitions per point (--reps, default 3, quick 1)
//
//	// Where things go and what is there:
//	func (r *Run) Dir() string                        // scratch directory, removed after the run
//	func (r *Run) OutDir() string                     // results directory (results.csv...)
//	func (r *Run) Log() *slog.Logger
//	func (r *Run) Cleanup(f func())                   // teardown, LIFO, always runs
//	func (r *Run) Note(format string, args ...any)    // a line in the report ("xrdcp: not installed, skipped")
//	func (r *Run) Have(tool string) bool              // exec.LookPath, and noted in the environment with its version
//	func (r *Run) Wanda() string                      // path of this binary (os.Executable), for running roles as processes
//
//	// Progress: which point of the sweep, with an ETA on stderr.
//	func (r *Run) Step(point string, i, n int)
//
//	// Results:
//	func (r *Run) Row(kv ...any)                      // one measured point: Row("rtt_ms", 40, "client", "wanda", "streams", 8, "mb_s", 115.6)
//	func (r *Run) Sampler(name string, every time.Duration, counter func() int64) *Sampler
//	    // samples counter (bytes) every interval from Start to Stop; the series is
//	    // kept (rates in MB/s) with its statistics, steady-state slice and volatility
//	func (r *Run) Plot(p PlotSpec)                    // rendered from the rows at the end (PNG + SVG)
//	func (r *Run) SeedTable(markdown string)          // the seed's numbers, printed beside ours in report.md
//	func (r *Run) Summary(markdown string)            // our own table (ratios, goals), printed before the results
//
// Sampler:
//
//	func (s *Sampler) Start()
//	func (s *Sampler) Stop() Series
//
// PlotSpec names columns of the rows: X, Y, and the columns whose values
// split the rows into lines (Group), with axis labels and optional log X.

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

func newTransferCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transfer",
		Short: "The bulk transfer service (FTS-like): serve it, submit jobs, follow them",
		Long: `A queue of transfer jobs with retries, alternative sources, multihop jobs,
checksums and a per-link optimizer; files move by third-party copy when both
ends do it, else through the service. It answers FTS3's REST API (Rucio, the
fts-rest-* commands and fts3.rest.client work against it) and wanda's own
under /api/v1/ (docs/transfer.md).

  wanda transfer serve --listen 127.0.0.1:8446 --db sqlite:/var/lib/wanda/transfer.db
  wanda transfer submit --server http://127.0.0.1:8446 https://a/store/f https://b/store/f
  wanda transfer status --server http://127.0.0.1:8446 --watch JOBID`,
	}
	cmd.AddCommand(newTransferServeCmd(), newTransferSubmitCmd(), newTransferStatusCmd(), newTransferListCmd(),
		newTransferCancelCmd(), newTransferLinksCmd())
	return cmd
}

func newTransferServeCmd() *cobra.Command {
	var (
		listen, db, logLevel, logFormat string
		allow, tokenHosts, admins       []string
		delegationKey                   string
		uiAnonymous, takeBack           bool
		o                               transfer.Options
		cf                              clientFlags
		af                              authFlags
		rf                              recordsFlags
	)
	cmd := &cobra.Command{
		Use:   "serve --listen HOST:PORT --db sqlite:PATH|postgres://...",
		Short: "Run an instance of the transfer service",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ac := config.DefaultAuth()
			var tls config.TLS
			if err := af.apply(cmd, &ac, &tls); err != nil {
				return err
			}
			rc := config.DefaultRecords()
			if err := rf.apply(cmd, &rc); err != nil {
				return err
			}
			log := app.NewLogger(config.Log{Level: logLevel, Format: logFormat}, cmd.ErrOrStderr())
			// Listening first: the address held names the instance.
			ln, err := app.Listen(listen)
			if err != nil {
				return err
			}
			if takeBack {
				o.Instance = transferInstance(ln.Addr())
			}
			t, err := app.NewTransfer(cmd.Context(), app.TransferOptions{DB: db, Client: c, Service: o, Auth: ac, TLS: tls, Allow: allow, TokenHosts: tokenHosts, UIAnonymous: uiAnonymous, Records: rc, Admins: admins, DelegationKey: delegationKey}, log, prometheus.NewRegistry())
			if err != nil {
				ln.Close()
				return err
			}
			defer t.Close()
			return t.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8446", "address of the REST API")
	f.StringVar(&db, "db", "sqlite:transfer.db", "the store: sqlite:PATH (one instance) or postgres://USER@HOST:PORT/DB (several instances share it)")
	f.IntVar(&o.MaxActive, "max-active", 64, "transfers this instance runs at once")
	f.IntVar(&o.Streams, "streams", 0, "streams per file (0: from the size)")
	f.DurationVar(&o.Lease, "lease", 30*time.Second, "how long a file stays this instance's without a renewal (another instance takes it over after)")
	f.BoolVar(&takeBack, "restart-takeback", true, "when started again on the same host and address (a fixed --listen port), take back at once the files this instance held when it stopped (killed, crashed), rather than wait for their leases")
	f.IntVar(&o.Optimizer.Min, "link-min", 2, "least active transfers per link")
	f.IntVar(&o.Optimizer.Max, "link-max", 50, "most active transfers per link")
	f.DurationVar(&o.Optimizer.Interval, "optimizer-interval", 10*time.Second, "how often a busy link's limit is reconsidered")
	f.StringArrayVar(&allow, "allow", nil, "let transfers reach this CIDR range, refused by default when private, loopback or link-local (repeatable), e.g. 10.1.0.0/16")
	f.StringArrayVar(&tokenHosts, "token-host", nil, "a storage (host:port) the service's own token (--token) may be sent to (repeatable); no other host gets it")
	f.StringArrayVar(&admins, "admin", nil, "an administrator, who may ban and configure storages (FTS3's /ban/se, /config/se): sub:ISSUER#SUBJECT, issuer:URL, group:/GROUP, dn:DN or user:NAME (repeatable); without authentication everyone may")
	f.BoolVar(&uiAnonymous, "ui-anonymous", false, "with token issuers configured, show the dashboard (/ui/: every job's id, submitter, state and file counts, the links) without a token; without issuers it is always shown")
	f.StringVar(&delegationKey, "delegation-key", "", "a file of 32 random bytes (or 64 hex digits: openssl rand -hex 32), mode 600, that seals the private keys of delegated X.509 proxies in the store (every instance on one database needs the same); default: stored in PEM, as FTS3 does")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	cf.add(cmd)
	af.add(cmd)
	rf.add(cmd)
	return cmd
}

// transferInstance names a `transfer serve` across its restarts: the
// host and the address it listens on, which no other live process on
// the host can hold while it does (so an owner under the same name is
// an earlier, dead, run; one whose port the system chose is named too,
// and taken back only by a run started again on that port).
func transferInstance(addr net.Addr) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return ""
	}
	return host + "/" + addr.String()
}

// apiFlags are the client verbs' server and credentials.
type apiFlags struct {
	server, token string
	asJSON        bool
}

func (a *apiFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.server, "server", "http://127.0.0.1:8446", "the transfer service's URL")
	cmd.Flags().StringVar(&a.token, "token", "", "bearer token file for the service's API (default: BEARER_TOKEN, BEARER_TOKEN_FILE, ...)")
	cmd.Flags().BoolVar(&a.asJSON, "json", false, "print the service's JSON answer")
}

// call sends one API request and decodes the answer into out.
func (a *apiFlags) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(a.server, "/")+path, rd)
	if err != nil {
		return usagef("--server %q: %v", a.server, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	src, err := cred.DiscoverToken(a.token)
	if err != nil {
		return err
	}
	if src != nil {
		tok, err := src.Token()
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = b
		return nil
	}
	return json.Unmarshal(b, out)
}

// show GETs path: with --json it prints the answer as it came (printed),
// else decodes it into out.
func (a *apiFlags) show(cmd *cobra.Command, path string, out any) (printed bool, err error) {
	var raw json.RawMessage
	if err := a.call(cmd.Context(), http.MethodGet, path, nil, &raw); err != nil {
		return false, err
	}
	if a.asJSON {
		fmt.Fprintf(cmd.OutOrStdout(), "%s", raw)
		return true, nil
	}
	return false, json.Unmarshal(raw, out)
}

func newTransferSubmitCmd() *cobra.Command {
	var (
		a    apiFlags
		file string
		p    store.Params
	)
	cmd := &cobra.Command{
		Use:   "submit [--server URL] SRC DST [SRC DST ...] | --file JOB.json",
		Short: "Submit a job; prints its id on the last line",
		RunE: func(cmd *cobra.Command, args []string) error {
			var req transfer.SubmitRequest
			switch {
			case file != "" && len(args) > 0:
				return usagef("give SRC DST pairs or --file, not both")
			case file != "":
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&req); err != nil {
					return usagef("--file %s: %v (want {\"files\": [{\"sources\": [...], \"destinations\": [...]}], \"params\": {...}})", file, err)
				}
			case len(args) == 0 || len(args)%2 != 0:
				return usagef("submit takes SRC DST pairs (got %d arguments)", len(args))
			default:
				for i := 0; i < len(args); i += 2 {
					req.Files = append(req.Files, transfer.FileRequest{Sources: []string{args[i]}, Destinations: []string{args[i+1]}})
				}
			}
			fl := cmd.Flags()
			for _, name := range []string{"verify-checksum", "overwrite", "retry", "retry-delay", "priority", "sync", "id"} {
				if !fl.Changed(name) {
					continue
				}
				switch name {
				case "verify-checksum":
					req.Params.VerifyChecksum = p.VerifyChecksum
				case "overwrite":
					req.Params.Overwrite = p.Overwrite
				case "retry":
					req.Params.Retry = p.Retry
				case "retry-delay":
					req.Params.RetryDelay = p.RetryDelay
				case "priority":
					req.Params.Priority = p.Priority
				case "sync":
					req.Params.Sync = p.Sync
				case "id":
					req.Params.ID = p.ID
				}
			}
			var out json.RawMessage
			if err := a.call(cmd.Context(), http.MethodPost, "/api/v1/jobs", req, &out); err != nil {
				return err
			}
			var j struct {
				ID string `json:"job_id"`
			}
			if err := json.Unmarshal(out, &j); err != nil || j.ID == "" {
				return fmt.Errorf("the service answered no job id: %s", out)
			}
			if a.asJSON {
				fmt.Fprintf(cmd.OutOrStdout(), "%s", out)
			}
			fmt.Fprintln(cmd.OutOrStdout(), j.ID)
			return nil
		},
	}
	a.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&file, "file", "", "the job as JSON (POST /api/v1/jobs's body)")
	fl.StringVar(&p.VerifyChecksum, "verify-checksum", "both", "none, source, target or both")
	fl.BoolVar(&p.Overwrite, "overwrite", false, "replace existing destinations")
	fl.IntVar(&p.Retry, "retry", 0, "more attempts per file after a retryable failure")
	fl.IntVar(&p.RetryDelay, "retry-delay", 0, "seconds before each retry")
	fl.IntVar(&p.Priority, "priority", 3, "1 (lowest) to 5")
	fl.BoolVar(&p.Sync, "sync", false, "skip files already at the destination (same size and checksum)")
	fl.StringVar(&p.ID, "id", "", "the job's id (a resubmission with the same id is the same job)")
	return cmd
}

func newTransferStatusCmd() *cobra.Command {
	var (
		a     apiFlags
		watch bool
		every time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status [--server URL] [--watch] [--json] JOBID",
		Short: "A job's state and its files",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			last := ""
			for {
				var raw json.RawMessage
				if err := a.call(cmd.Context(), http.MethodGet, "/api/v1/jobs/"+args[0], nil, &raw); err != nil {
					return err
				}
				var j store.Job
				if err := json.Unmarshal(raw, &j); err != nil {
					return err
				}
				line := jobLine(j)
				switch {
				case a.asJSON && (!watch || j.State.Final()):
					fmt.Fprintf(out, "%s", raw)
				case !a.asJSON && line != last:
					fmt.Fprintln(out, line)
				}
				last = line
				if !watch || j.State.Final() {
					if !a.asJSON && j.State != store.JobFinished {
						return printFailed(cmd.Context(), out, &a, j)
					}
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(every):
				}
			}
		},
	}
	a.add(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the job until it ends")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "how often --watch asks")
	return cmd
}

// jobLine is a job in one line: state and files by state.
func jobLine(j store.Job) string {
	var parts []string
	for _, s := range []store.FileState{store.FileFinished, store.FileActive, store.FileSubmitted, store.FileOnHold, store.FileNotUsed, store.FileFailed, store.FileCanceled} {
		if n := j.Files[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ToLower(string(s))))
		}
	}
	return fmt.Sprintf("%s %s: %s", j.ID, j.State, strings.Join(parts, ", "))
}

// printFailed lists a job's files that did not finish, with why.
func printFailed(ctx context.Context, out io.Writer, a *apiFlags, j store.Job) error {
	var fr transfer.FilesResponse
	if err := a.call(ctx, http.MethodGet, "/api/v1/jobs/"+j.ID+"/files", nil, &fr); err != nil {
		return err
	}
	for _, f := range fr.Files {
		if f.State == store.FileFailed || f.State == store.FileCanceled {
			fmt.Fprintf(out, "  file %d %s: %s -> %s: %s: %s\n", f.Index, f.State, f.Sources[f.SourceIndex], f.Destination, f.ErrorClass, f.Reason)
		}
	}
	return nil
}

func newTransferListCmd() *cobra.Command {
	var (
		a     apiFlags
		state string
	)
	cmd := &cobra.Command{
		Use:   "list [--server URL] [--state S,...]",
		Short: "Jobs, newest first",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var l struct{ Jobs []store.Job }
			if printed, err := a.show(cmd, "/api/v1/jobs?state="+state, &l); printed || err != nil {
				return err
			}
			for _, j := range l.Jobs {
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  %s\n", j.Created.Local().Format(time.DateTime), jobLine(j), j.Submitter)
			}
			return nil
		},
	}
	a.add(cmd)
	cmd.Flags().StringVar(&state, "state", "", "only jobs in these states (comma-separated)")
	return cmd
}

func newTransferCancelCmd() *cobra.Command {
	var a apiFlags
	cmd := &cobra.Command{
		Use:   "cancel [--server URL] JOBID",
		Short: "Cancel a job (files in flight are stopped, nothing partial is left)",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var j store.Job
			if err := a.call(cmd.Context(), http.MethodDelete, "/api/v1/jobs/"+args[0], nil, &j); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), jobLine(j))
			return nil
		},
	}
	a.add(cmd)
	return cmd
}

func newTransferLinksCmd() *cobra.Command {
	var a apiFlags
	cmd := &cobra.Command{
		Use:   "links [--server URL]",
		Short: "The optimizer's state per link, with its latest decisions",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var l struct{ Links []transfer.LinkInfo }
			if printed, err := a.show(cmd, "/api/v1/links", &l); printed || err != nil {
				return err
			}
			for _, li := range l.Links {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: limit %d, %d active, %d queued, %.1f MB/s, success %.0f%% (%s)\n",
					li.Link, li.Limit, li.Active, li.Queued, li.Rate, 100*li.Success, li.Reason)
			}
			return nil
		},
	}
	a.add(cmd)
	return cmd
}

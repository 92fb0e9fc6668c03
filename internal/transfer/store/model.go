package store

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"
)

// JobState is a job's state (FTS3's names and meanings).
type JobState string

// Job states.
const (
	JobSubmitted     JobState = "SUBMITTED"     // no file claimed yet
	JobReady         JobState = "READY"         // FTS3's: files scheduled, none started (wanda starts a claimed file at once: not stored)
	JobActive        JobState = "ACTIVE"        // some file claimed, some not final
	JobFinished      JobState = "FINISHED"      // every file FINISHED
	JobFinishedDirty JobState = "FINISHEDDIRTY" // final, some FINISHED, some FAILED
	JobFailed        JobState = "FAILED"        // final, no file FINISHED (or a hop of a multihop job failed)
	JobCanceled      JobState = "CANCELED"      // canceled before all files were final
)

// JobStates are every job state, in their order of progress.
var JobStates = []JobState{JobSubmitted, JobReady, JobActive, JobFinished, JobFinishedDirty, JobFailed, JobCanceled}

// Final reports whether s is an end state.
func (s JobState) Final() bool {
	return s == JobFinished || s == JobFinishedDirty || s == JobFailed || s == JobCanceled
}

// FileState is a file's state (FTS3's names and meanings).
type FileState string

// File states.
const (
	FileSubmitted FileState = "SUBMITTED" // waiting (also between retries, until NotBefore)
	FileReady     FileState = "READY"     // FTS3's: scheduled, the copy starting (wanda starts a claimed file at once: not stored)
	FileActive    FileState = "ACTIVE"    // claimed by an owner, under a lease
	FileFinished  FileState = "FINISHED"
	FileFailed    FileState = "FAILED"
	FileCanceled  FileState = "CANCELED"
	// FileNotUsed is a hop of a multihop job that has not started (the
	// previous hop has not finished; it never starts when one failed).
	// (The unused alternatives of a file with several sources are shown
	// NOT_USED by the API, from the file's SourceIndex and Tried.)
	FileNotUsed FileState = "NOT_USED"
	// FileOnHold waits for a storage's ban (status WAIT) to be lifted.
	FileOnHold FileState = "ON_HOLD"
)

// FileStates are every file state: the keys of Job.Files.
var FileStates = []FileState{FileSubmitted, FileReady, FileActive, FileFinished, FileFailed, FileCanceled, FileNotUsed, FileOnHold}

// Final reports whether s is an end state. NOT_USED is not one (FTS3:
// "neither terminal nor not terminal"): a job settles without its
// NOT_USED hops once no file is open.
func (s FileState) Final() bool {
	return s == FileFinished || s == FileFailed || s == FileCanceled
}

// Open reports whether a file in state s may still move: waiting, on
// hold or in flight.
func (s FileState) Open() bool {
	return s == FileSubmitted || s == FileReady || s == FileActive || s == FileOnHold
}

// Job types (FTS3's job_type).
const (
	TypeRegular  = "N" // files with one source each
	TypeReplicas = "R" // a file with alternative sources
	TypeMultihop = "H" // files are hops, each starting when the previous finished
)

// Params are a job's parameters (FTS3's "params", as the service keeps
// them: the API parses the many spellings FTS3's clients send).
type Params struct {
	// VerifyChecksum: none, source, target or both.
	VerifyChecksum string `json:"verify_checksum,omitempty"`
	Overwrite      bool   `json:"overwrite,omitempty"`
	// OverwriteOnRetry replaces an existing destination on a retry only.
	OverwriteOnRetry bool `json:"overwrite_on_retry,omitempty"`
	// Retry is how many more attempts a file gets after a retryable
	// failure; RetryDelay the wait before each (seconds).
	Retry      int `json:"retry,omitempty"`
	RetryDelay int `json:"retry_delay,omitempty"`
	// Priority 1 (lowest) to 5 (highest); 3 when unset.
	Priority int `json:"priority,omitempty"`
	// Sync skips files already at the destination with the same size and
	// checksum.
	Sync        bool            `json:"sync,omitempty"`
	JobMetadata json.RawMessage `json:"job_metadata,omitempty"`
	// ID, when the client gives one, makes the submission idempotent.
	ID string `json:"id,omitempty"`
	// Multihop: the files are hops, run in order (Hops of them);
	// OverwriteHop replaces existing files at every hop's destination
	// but the last one.
	Multihop     bool `json:"multihop,omitempty"`
	Hops         int  `json:"hops,omitempty"`
	OverwriteHop bool `json:"overwrite_hop,omitempty"`
	// StrictCopy copies without the checks around it (no checksum, no
	// existence test): FTS3's strict_copy.
	StrictCopy bool `json:"strict_copy,omitempty"`
	// Timeout bounds one attempt at a file (seconds, 0: none); Streams
	// its parallel streams (0: the service's choice).
	Timeout int `json:"timeout,omitempty"`
	Streams int `json:"nostreams,omitempty"`
	// DelegationID and DelegationDN name the X.509 proxy the job's files
	// move with (a certificate user's delegation); "": none.
	DelegationID string `json:"delegation_id,omitempty"`
	DelegationDN string `json:"delegation_dn,omitempty"`
}

// Job is a submitted job as stored.
type Job struct {
	ID        string   `json:"job_id"`
	Submitter string   `json:"submitter"` // the identity's key: "issuer#subject", a DN, or "anonymous"
	State     JobState `json:"state"`
	// Type is TypeRegular, TypeReplicas or TypeMultihop.
	Type string `json:"job_type"`
	// UserDN, VO and CredID are the submitter as FTS3 names it: the
	// token's subject or the certificate's DN, the VO, the delegation id.
	UserDN string `json:"user_dn"`
	VO     string `json:"vo_name"`
	CredID string `json:"cred_id"`
	// SourceSE and DestSE are the storages all the job's files share
	// ("scheme://host"; "" when they differ; a multihop job's first
	// source and last destination).
	SourceSE string `json:"source_se"`
	DestSE   string `json:"dest_se"`
	// Reason says why the job ended as it did ("" when FINISHED).
	Reason  string    `json:"reason,omitempty"`
	Params  Params    `json:"params"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Finished is when the job reached its final state.
	Finished time.Time `json:"finished,omitzero"`
	// Deadline: files not started by then are canceled (FTS3's
	// max_time_in_queue); zero: none.
	Deadline time.Time `json:"deadline,omitzero"`
	// Files counts the job's files by state, every state present (filled
	// by Job and ListJobs).
	Files map[FileState]int `json:"files"`
}

// FileKey names one file of a job.
type FileKey struct {
	Job   string `json:"job_id"`
	Index int    `json:"index"`
}

// File is one file of a job: alternative sources, one destination.
type File struct {
	FileKey
	Sources     []string        `json:"sources"`
	Destination string          `json:"destination"`
	Checksum    string          `json:"checksum,omitempty"` // "alg:hex" the client expects, "alg" for the algorithm alone, or ""
	Filesize    int64           `json:"filesize"`           // -1: unknown
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	// SourceIndex is the source in use (the next to try when waiting);
	// Tried has bit i set for each source that was tried and failed.
	SourceIndex int `json:"source_index"`
	Tried       int `json:"tried,omitempty"`
	// Link is "source host -> destination host" of the source in use
	// (LinkOf): the optimizer's unit.
	Link string `json:"link"`
	// SourceSE and DestSE are the storages of the source in use and of
	// the destination (SEOf).
	SourceSE string `json:"source_se"`
	DestSE   string `json:"dest_se"`
	// Activity and Selection are FTS3's activity label and selection
	// strategy among the sources.
	Activity  string    `json:"activity"`
	Selection string    `json:"selection_strategy"`
	Priority  int       `json:"priority"`  // the job's
	Submitter string    `json:"submitter"` // the job's (fair share)
	State     FileState `json:"state"`
	Attempts  int       `json:"attempts"`
	// NotBefore: a SUBMITTED file is not claimed before (retry delay).
	NotBefore time.Time `json:"not_before,omitzero"`
	// Owner and LeaseUntil: who holds an ACTIVE file, until when.
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// From the last attempt: its error class and message, bytes, rate
	// (MB/s) and mode (tpc-pull, tpc-push, stream, skipped).
	ErrorClass string    `json:"error_class,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Bytes      int64     `json:"bytes"`
	Rate       float64   `json:"rate_mb_s"`
	Mode       string    `json:"mode,omitempty"`
	Started    time.Time `json:"started,omitzero"`
	Ended      time.Time `json:"ended,omitzero"`
	// SourceTokens[i] is the bearer token for Sources[i], DestToken the
	// destination's (none: the service's own credentials). Secrets: never
	// encoded, read back by Claim only, cleared when the file ends.
	SourceTokens []string `json:"-"`
	DestToken    string   `json:"-"`
}

// Attempt is one try at a file.
type Attempt struct {
	FileKey
	N           int       `json:"n"` // 1, 2, ...
	Owner       string    `json:"owner"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	Source      string    `json:"source"`
	Destination string    `json:"destination"`
	Mode        string    `json:"mode"`
	Bytes       int64     `json:"bytes"`
	ErrorClass  string    `json:"error_class,omitempty"` // "" on success
	Message     string    `json:"message,omitempty"`
}

// JobQuery selects jobs for ListJobs: by state (none: all), newest
// first, at most Limit (0: 100), created before Before when set (paging).
// The other fields narrow it further when set.
type JobQuery struct {
	States []JobState
	Limit  int
	Before time.Time
	// Unfinished keeps the jobs not final, or final at FinishedAfter or
	// later when that is set (FTS3's listing rules).
	Unfinished    bool
	FinishedAfter time.Time
	UserDN        string
	VO            string
	CredID        string
	SourceSE      string
	DestSE        string
	// NoCounts leaves the jobs' file counts out (not filled in): one
	// query less per job for a listing that does not show them.
	NoCounts bool
}

// Ending is an attempt that ended and where its file goes next, as
// Finish takes them.
type Ending struct {
	Attempt   Attempt
	Next      FileState
	NotBefore time.Time
	// Advance, with Next SUBMITTED, moves the file on to source To: the
	// one in use is marked tried, the link and source storage follow.
	Advance bool
	To      int
}

// LinkLoad is a link's files waiting (claimable now) and active, and the
// storages at its ends (of one of its files).
type LinkLoad struct {
	Link     string `json:"link"`
	Queued   int    `json:"queued"`
	Active   int    `json:"active"`
	SourceSE string `json:"source_se"`
	DestSE   string `json:"dest_se"`
}

// Decision is one decision of the optimizer about a link.
type Decision struct {
	Link    string    `json:"link"`
	Time    time.Time `json:"time"`
	Active  int       `json:"active"`    // the new limit of active transfers
	Rate    float64   `json:"rate_mb_s"` // the link's throughput then
	Success float64   `json:"success"`   // success ratio of the window
	Reason  string    `json:"reason"`
}

// Ban statuses (FTS3's).
const (
	BanCancel = "CANCEL"  // the storage's files are canceled, new ones refused
	BanWait   = "WAIT"    // its queued files wait (ON_HOLD), new ones refused
	BanWaitAS = "WAIT_AS" // WAIT, and new submissions are taken and wait
)

// Ban is a banned storage.
type Ban struct {
	SE      string    `json:"se"`
	VO      string    `json:"vo"`
	Status  string    `json:"status"`
	Message string    `json:"message"`
	AdminDN string    `json:"admin_dn"`
	Added   time.Time `json:"addition_time"`
	// Timeout (seconds, 0: none): files still on hold that long after
	// the ban are canceled.
	Timeout int `json:"timeout,omitempty"`
}

// SEConfig is a storage's configuration as set (FTS3's /config/se):
// se_info (inbound_max_active, outbound_max_active, ...) and the
// per-VO operation limits, as JSON objects.
type SEConfig struct {
	SE         string
	Info       json.RawMessage
	Operations json.RawMessage
}

// SEOf is a URL's storage as FTS3 names it: "scheme://host" (no port).
func SEOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return SEOfURL(u)
}

// SEOfURL is SEOf of a parsed URL.
func SEOfURL(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname())
}

// LinkOf is the link of a copy from src to dst: "host:port -> host:port"
// as the URLs name them, in lower case.
func LinkOf(src, dst string) string {
	s, _ := url.Parse(src)
	d, _ := url.Parse(dst)
	return LinkOfURL(s, d)
}

// LinkOfURL is LinkOf of parsed URLs (nil: no host).
func LinkOfURL(src, dst *url.URL) string {
	var sh, dh string
	if src != nil {
		sh = strings.ToLower(src.Host)
	}
	if dst != nil {
		dh = strings.ToLower(dst.Host)
	}
	return sh + " -> " + dh
}

// Outcome is the end state of a job of type typ whose files are all
// settled (none open): finished, failed and canceled of total. As FTS3:
// all finished is FINISHED; some finished and some failed is
// FINISHEDDIRTY (FAILED for a multihop job: its destination was not
// reached); else FAILED when any failed, CANCELED when any was
// canceled.
func Outcome(typ string, finished, failed, canceled, total int) JobState {
	switch {
	case finished == total:
		return JobFinished
	case finished > 0 && failed > 0 && typ != TypeMultihop:
		return JobFinishedDirty
	case failed > 0:
		return JobFailed
	case canceled > 0:
		return JobCanceled
	}
	return JobFailed
}

// OutcomeReason is the reason a job ending in state s gives.
func OutcomeReason(s JobState) string {
	switch s {
	case JobFinished:
		return ""
	case JobCanceled:
		return "files canceled"
	}
	return "one or more files failed: see the files' reasons"
}

// Counts is an empty count of files by state, every state present.
func Counts() map[FileState]int {
	m := make(map[FileState]int, len(FileStates))
	for _, s := range FileStates {
		m[s] = 0
	}
	return m
}

// Next returns the source a file goes on to after its source in use
// failed: the first in the order given that is neither the one in use
// nor tried yet, and that skip (may be nil) does not refuse; ok false
// when none is left.
func (f File) Next(skip func(source string) bool) (int, bool) {
	for i := range f.Sources {
		if i == f.SourceIndex || f.Tried&(1<<i) != 0 {
			continue
		}
		if skip != nil && skip(f.Sources[i]) {
			continue
		}
		return i, true
	}
	return 0, false
}

// Moved is f as ending o leaves it: moved on to source o.To (the one in
// use marked tried; its link and source storage follow) when o.Advance;
// the source in use marked tried when o.Next is FAILED.
func Moved(f File, o Ending) File {
	switch {
	case o.Advance && o.To >= 0 && o.To < len(f.Sources) && o.To != f.SourceIndex:
		f.Tried |= 1 << f.SourceIndex
		f.SourceIndex = o.To
		f.Link = LinkOf(f.Sources[o.To], f.Destination)
		f.SourceSE = SEOf(f.Sources[o.To])
	case o.Next == FileFailed:
		f.Tried |= 1 << f.SourceIndex
	}
	return f
}

// BanMove is what a ban with status CANCEL of storage se does to an open
// (or NOT_USED) file whose source in use or destination is there: it is
// canceled (cancel true), or moved on to source to, the next one not
// tried that is neither at se nor refused by banned.
func BanMove(f File, se string, banned func(se string) bool) (to int, cancel bool) {
	if f.DestSE == se {
		return 0, true
	}
	to, ok := f.Next(func(src string) bool {
		s := SEOf(src)
		return s == se || banned != nil && banned(s)
	})
	return to, !ok
}

// Legacy is a file stored before schema version 2 (no storages).
type Legacy struct {
	Job         string
	Index       int
	Sources     []string
	Destination string
}

// LegacyStorages are the storages the version 2 migration gives files
// stored before it (their first source's and their destination's) and
// their jobs (those all their files share, "" where they differ).
func LegacyStorages(fs []Legacy) (files [][2]string, jobs map[string][2]string) {
	files = make([][2]string, len(fs))
	jobs = map[string][2]string{}
	for i, f := range fs {
		sse, dse := SEOf(f.Sources[0]), SEOf(f.Destination)
		files[i] = [2]string{sse, dse}
		j, seen := jobs[f.Job]
		switch {
		case !seen:
			j = [2]string{sse, dse}
		default:
			if j[0] != sse {
				j[0] = ""
			}
			if j[1] != dse {
				j[1] = ""
			}
		}
		jobs[f.Job] = j
	}
	return files, jobs
}

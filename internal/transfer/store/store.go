// Package store is the transfer service's persistence: jobs, their files,
// every attempt at a file, and the optimizer's decisions, behind one
// Store interface with two implementations — sqlite (embedded, one
// process) and postgres (several service instances sharing one
// database). Work is handed out by Claim with leases: a file is ACTIVE
// under one owner until that owner finishes it or its lease runs out
// (Expire gives it back), so no file is ever moved by two instances at
// once and nothing is lost when one dies. storetest holds the conformance
// suite both implementations pass.
//
// Times are stored in UTC to the microsecond (PostgreSQL's precision), so
// a time read back equals the one written truncated to the microsecond.
// Operations that take a now use it, not the store's clock, for every
// decision about leases and retry delays: tests and the scheduler decide
// what time it is.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// JobState is a job's state.
type JobState string

// Job states (FTS3's names).
const (
	JobSubmitted     JobState = "SUBMITTED"     // no file claimed yet
	JobActive        JobState = "ACTIVE"        // some file claimed, some not final
	JobFinished      JobState = "FINISHED"      // every file FINISHED
	JobFinishedDirty JobState = "FINISHEDDIRTY" // final, some FINISHED, some FAILED or CANCELED
	JobFailed        JobState = "FAILED"        // final, no file FINISHED
	JobCanceled      JobState = "CANCELED"      // canceled before all files were final
)

// Final reports whether s is an end state.
func (s JobState) Final() bool {
	return s == JobFinished || s == JobFinishedDirty || s == JobFailed || s == JobCanceled
}

// FileState is a file's state.
type FileState string

// File states.
const (
	FileSubmitted FileState = "SUBMITTED" // waiting (also between retries, until NotBefore)
	FileActive    FileState = "ACTIVE"    // claimed by an owner, under a lease
	FileFinished  FileState = "FINISHED"
	FileFailed    FileState = "FAILED"
	FileCanceled  FileState = "CANCELED"
)

// Final reports whether s is an end state.
func (s FileState) Final() bool {
	return s == FileFinished || s == FileFailed || s == FileCanceled
}

// Params are a job's parameters (FTS3's "params").
type Params struct {
	// VerifyChecksum: none, source, target or both.
	VerifyChecksum string `json:"verify_checksum,omitempty"`
	Overwrite      bool   `json:"overwrite,omitempty"`
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
}

// Job is a submitted job as stored.
type Job struct {
	ID        string    `json:"job_id"`
	Submitter string    `json:"submitter"` // the credential's subject, or "anonymous"
	State     JobState  `json:"state"`
	Params    Params    `json:"params"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
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
	Checksum    string          `json:"checksum,omitempty"` // "alg:hex" the client expects, or ""
	Filesize    int64           `json:"filesize"`           // -1: unknown
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	// Link is "source host -> destination host" (or the sites' labels),
	// set at submission from the first source: the optimizer's unit.
	Link      string    `json:"link"`
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
type JobQuery struct {
	States []JobState
	Limit  int
	Before time.Time
}

// Ending is an attempt that ended and where its file goes next, as
// Finish takes them.
type Ending struct {
	Attempt   Attempt
	Next      FileState
	NotBefore time.Time
}

// CheckNext refuses a next state other than FINISHED, FAILED or
// SUBMITTED.
func (o Ending) CheckNext() error {
	if o.Next != FileFinished && o.Next != FileFailed && o.Next != FileSubmitted {
		return fmt.Errorf("finish %s/%d: next state %q: want FINISHED, FAILED or SUBMITTED", o.Attempt.Job, o.Attempt.Index, o.Next)
	}
	return nil
}

// LinkLoad is a link's files waiting (claimable now) and active.
type LinkLoad struct {
	Link   string `json:"link"`
	Queued int    `json:"queued"`
	Active int    `json:"active"`
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

// Errors.
var (
	ErrNotFound  = errors.New("not found")
	ErrLeaseLost = errors.New("lease lost: the file is no longer this owner's")
	ErrFinal     = errors.New("already in a final state")
)

// NewID returns a fresh job id: a random (version 4) UUID, as FTS3's.
func NewID() string { return uuid.NewString() }

// Error classes the store itself records on attempts.
const (
	ClassLeaseExpired = "lease expired" // Expire gave the file back
	ClassCanceled     = "canceled"      // Cancel stopped the file
)

// Store persists the service's state. Implementations are safe for
// concurrent use by several goroutines and (postgres) several processes.
// Methods returning lists return empty ones, not nil, when there is
// nothing (they encode as [] in JSON).
type Store interface {
	// Submit stores a job in state SUBMITTED and its files (their Index
	// is set from their order; State SUBMITTED, Attempts 0; Priority and
	// Submitter the job's). When a job with j.ID exists, it is returned
	// unchanged with created false (a resubmission with a client-supplied
	// id; the files given are ignored). An empty j.ID gets NewID; an
	// unset Params.Priority becomes 3; a job needs at least one file.
	// j.Created and Updated are set by the store.
	Submit(ctx context.Context, j Job, files []File) (stored Job, created bool, err error)
	// Job returns a job with its file counts; ErrNotFound.
	Job(ctx context.Context, id string) (Job, error)
	// Files returns a job's files in index order; ErrNotFound.
	Files(ctx context.Context, id string) ([]File, error)
	// Attempts returns every attempt at a job's files, by file and N;
	// ErrNotFound.
	Attempts(ctx context.Context, id string) ([]Attempt, error)
	// ListJobs returns jobs with their file counts.
	ListJobs(ctx context.Context, q JobQuery) ([]Job, error)
	// Cancel moves every non-final file of a job to CANCELED (error class
	// ClassCanceled) and the job to CANCELED; ErrNotFound, or ErrFinal
	// with the job as it is when it already ended. Active files are
	// canceled too, their attempt recorded as ended now with ClassCanceled:
	// their owner learns it from Renew or Finish (ErrLeaseLost) and stops.
	Cancel(ctx context.Context, id string) (Job, error)

	// Links returns, per link with queued or active files, how many are
	// claimable now (SUBMITTED, NotBefore passed) and how many ACTIVE,
	// ordered by link.
	Links(ctx context.Context, now time.Time) ([]LinkLoad, error)
	// Claim leases up to n claimable files of link to owner until
	// now+lease: highest priority first, then a fair share between
	// submitters (the one with the fewest active files of the link
	// first, counting the files this claim hands out as it goes), then
	// oldest (job submission time, then index). Claimed files are ACTIVE
	// with Attempts incremented, Started set to now and Ended cleared;
	// their jobs become ACTIVE. They are returned in that order. On
	// postgres, concurrent claims by several instances never return the
	// same file (FOR UPDATE SKIP LOCKED).
	Claim(ctx context.Context, owner, link string, n int, now time.Time, lease time.Duration) ([]File, error)
	// Renew extends owner's leases on files to now+lease, and returns
	// those that are no longer its (canceled, or expired and taken).
	Renew(ctx context.Context, owner string, files []FileKey, now time.Time, lease time.Duration) (lost []FileKey, err error)
	// Finish records attempt a of a file owner holds (ErrLeaseLost
	// otherwise) and moves the file to next: FINISHED or FAILED (final),
	// or SUBMITTED again with notBefore for a retry. a's error class,
	// message, bytes, mode and times become the file's (zero times: the
	// claim's start, and now), its rate is computed from them. a.N, when
	// not 0, must be the claimed file's Attempts: a fencing token, so a
	// late Finish from an earlier claim by the same owner (expired, then
	// claimed again) is refused with ErrLeaseLost. A lease that has run
	// out but was not yet given back by Expire still holds. When every
	// file of the job is final, the job's state follows (FINISHED,
	// FINISHEDDIRTY, FAILED).
	Finish(ctx context.Context, owner string, a Attempt, next FileState, notBefore time.Time) error
	// FinishAll is Finish for several attempts of owner in one
	// transaction, the cost of a commit shared: errs[i] is outs[i]'s
	// ErrNotFound or ErrLeaseLost (nothing recorded for it); err is a
	// failure of the whole (nothing recorded at all).
	FinishAll(ctx context.Context, owner string, outs []Ending) (errs []error, err error)
	// Expire gives files whose lease ended before now back (SUBMITTED,
	// claimable at once; their attempt recorded as lost with error class
	// ClassLeaseExpired) and returns how many.
	Expire(ctx context.Context, now time.Time) (int, error)

	// Decide records an optimizer decision; Decisions returns a link's
	// latest first (all links when link is ""), at most limit (0: 100).
	Decide(ctx context.Context, d Decision) error
	Decisions(ctx context.Context, link string, limit int) ([]Decision, error)

	Close() error
}

// Outcome is the end state of a job with total files, all final,
// finished of them FINISHED.
func Outcome(finished, total int) JobState {
	switch finished {
	case total:
		return JobFinished
	case 0:
		return JobFailed
	}
	return JobFinishedDirty
}

// PrepareSubmit checks a job for Submit and fills its defaults (an id,
// priority 3); it returns the parameters as stored (JSON).
func PrepareSubmit(j *Job, files []File) ([]byte, error) {
	if len(files) == 0 {
		return nil, errors.New("submit: a job needs at least one file")
	}
	if j.ID == "" {
		j.ID = NewID()
	}
	if j.Params.Priority == 0 {
		j.Params.Priority = 3
	}
	params, err := json.Marshal(j.Params)
	if err != nil {
		return nil, fmt.Errorf("submit %s: %w", j.ID, err)
	}
	return params, nil
}

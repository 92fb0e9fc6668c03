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
	"strings"
	"time"

	"github.com/google/uuid"
)

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
	// is set from their order; Attempts 0; Priority and Submitter the
	// job's; State SUBMITTED unless given: NOT_USED for the later hops
	// of a multihop job, ON_HOLD for a file waiting on a ban). Tokens are
	// kept for Claim. When a job with j.ID exists, it is returned
	// unchanged with created false (the files given are ignored). An
	// empty j.ID gets NewID; an unset Params.Priority becomes 3; an unset
	// Type TypeRegular; a job needs at least one file. j.Created and
	// Updated are set by the store.
	Submit(ctx context.Context, j Job, files []File) (stored Job, created bool, err error)
	// Job returns a job with its file counts; ErrNotFound.
	Job(ctx context.Context, id string) (Job, error)
	// Files returns a job's files in index order (without tokens);
	// ErrNotFound.
	Files(ctx context.Context, id string) ([]File, error)
	// Attempts returns every attempt at a job's files, by file and N;
	// ErrNotFound.
	Attempts(ctx context.Context, id string) ([]Attempt, error)
	// ListJobs returns jobs with their file counts.
	ListJobs(ctx context.Context, q JobQuery) ([]Job, error)
	// Cancel moves every open file of a job to CANCELED (error class
	// ClassCanceled) and the job to CANCELED with reason; ErrNotFound,
	// or ErrFinal with the job as it is when it already ended. Active
	// files are canceled too, their attempt recorded as ended now with
	// ClassCanceled: their owner learns it from Renew or Finish
	// (ErrLeaseLost) and stops. NOT_USED hops stay NOT_USED.
	Cancel(ctx context.Context, id, reason string) (Job, error)
	// CancelFiles cancels some files of a job (by index) as Cancel does,
	// and returns each one's state after it (CANCELED, or the state it
	// was already in; "" for an index the job does not have), and the
	// job: CANCELED when no file is left open; ErrNotFound.
	CancelFiles(ctx context.Context, id string, idx []int, reason string) ([]FileState, Job, error)
	// SetPriority sets the priority of a job and of its files; ErrFinal
	// (with the job) when it has ended; ErrNotFound.
	SetPriority(ctx context.Context, id string, priority int) (Job, error)

	// Links returns, per link with queued or active files, how many are
	// claimable now (SUBMITTED, NotBefore passed) and how many ACTIVE,
	// ordered by link (without their storages: LinkStorages).
	Links(ctx context.Context, now time.Time) ([]LinkLoad, error)
	// LinkStorages returns the storages at the ends of each link with
	// queued or active files (of one of its files): source, destination.
	LinkStorages(ctx context.Context) (map[string][2]string, error)
	// Claim leases up to n claimable files of link to owner until
	// now+lease: highest priority first, then a fair share between
	// submitters (the one with the fewest active files of the link
	// first, counting the files this claim hands out as it goes), then
	// oldest (job submission time, then index). Claimed files are ACTIVE
	// with Attempts incremented, Started set to now and Ended cleared;
	// their jobs become ACTIVE. They are returned in that order, with
	// their tokens. On postgres, concurrent claims by several instances
	// never return the same file (FOR UPDATE SKIP LOCKED).
	Claim(ctx context.Context, owner, link string, n int, now time.Time, lease time.Duration) ([]File, error)
	// Renew extends owner's leases on files to now+lease, and returns
	// those that are no longer its (canceled, or expired and taken).
	Renew(ctx context.Context, owner string, files []FileKey, now time.Time, lease time.Duration) (lost []FileKey, err error)
	// Finish records attempt a of a file owner holds (ErrLeaseLost
	// otherwise) and moves the file to next: FINISHED or FAILED (final),
	// or SUBMITTED again with notBefore for a retry (ON_HOLD instead when
	// a storage of the file is banned with status WAIT). a's error
	// class, message, bytes, mode and times become the file's (zero
	// times: the claim's start, and now), its rate is computed from
	// them. a.N, when not 0, must be the claimed file's Attempts: a
	// fencing token, so a late Finish from an earlier claim by the same
	// owner (expired, then claimed again) is refused with ErrLeaseLost. A
	// lease that has run out but was not yet given back by Expire still
	// holds. A FINISHED hop of a multihop job lets the next one start
	// (NOT_USED to SUBMITTED). When no file of the job is open any more,
	// the job's state follows (Outcome).
	Finish(ctx context.Context, owner string, a Attempt, next FileState, notBefore time.Time) error
	// FinishAll is Finish for several attempts of owner in one
	// transaction, the cost of a commit shared, each with where its file
	// goes (an Ending may also move the file on to another source):
	// errs[i] is outs[i]'s ErrNotFound or ErrLeaseLost (nothing recorded
	// for it); err is a failure of the whole (nothing recorded at all).
	FinishAll(ctx context.Context, owner string, outs []Ending) (errs []error, err error)
	// Expire gives files whose lease ended before now back (SUBMITTED,
	// claimable at once; their attempt recorded as lost with error class
	// ClassLeaseExpired) and returns how many.
	Expire(ctx context.Context, now time.Time) (int, error)
	// TakeBack gives back, as Expire does (at once, leases or not), the
	// files held by owners whose names begin with prefix, but self: an
	// instance that starts again under a stable name (Options.Instance)
	// takes back what its earlier, dead, runs held. It returns how many.
	TakeBack(ctx context.Context, prefix, self string, now time.Time) (int, error)
	// Overdue cancels the files not yet started of jobs whose Deadline
	// is before now, and the files on hold for a ban whose Timeout has
	// run out; it returns how many.
	Overdue(ctx context.Context, now time.Time) (int, error)

	// Ban bans a storage (replacing its ban, if any): with BanCancel its
	// open files are canceled, or moved on to a source elsewhere when
	// they have one not tried; with BanWait or BanWaitAS its waiting
	// files go ON_HOLD. It returns the ids of the jobs affected.
	Ban(ctx context.Context, b Ban) ([]string, error)
	// Unban lifts a storage's ban: its files on hold wait again (unless
	// another ban holds them); ErrNotFound when it was not banned.
	Unban(ctx context.Context, se string) ([]string, error)
	// Bans lists the banned storages.
	Bans(ctx context.Context) ([]Ban, error)
	// SetSEConfig stores a storage's configuration (replacing it);
	// DeleteSEConfig removes it (ErrNotFound); SEConfigs lists them.
	SetSEConfig(ctx context.Context, c SEConfig) error
	DeleteSEConfig(ctx context.Context, se string) error
	SEConfigs(ctx context.Context) ([]SEConfig, error)

	// Decide records an optimizer decision; Decisions returns a link's
	// latest first (all links when link is ""), at most limit (0: 100).
	Decide(ctx context.Context, d Decision) error
	Decisions(ctx context.Context, link string, limit int) ([]Decision, error)

	Delegations

	Close() error
}

// PrepareSubmit checks a job for Submit and fills its defaults (an id,
// priority 3, type N, files SUBMITTED); it returns the parameters as
// stored (JSON).
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
	if j.Type == "" {
		j.Type = TypeRegular
	}
	for i := range files {
		if files[i].State == "" {
			files[i].State = FileSubmitted
		}
		if files[i].Activity == "" {
			files[i].Activity = "default"
		}
		if files[i].Link == "" && len(files[i].Sources) > 0 {
			f := &files[i]
			f.Link = LinkOf(f.Sources[f.SourceIndex], f.Destination)
		}
		if files[i].SourceSE == "" && len(files[i].Sources) > 0 {
			files[i].SourceSE = SEOf(files[i].Sources[files[i].SourceIndex])
		}
		if files[i].DestSE == "" {
			files[i].DestSE = SEOf(files[i].Destination)
		}
	}
	params, err := json.Marshal(j.Params)
	if err != nil {
		return nil, fmt.Errorf("submit %s: %w", j.ID, err)
	}
	return params, nil
}

// Tokens is a file's tokens as stored: the source tokens as a JSON array
// ("" when none).
func Tokens(f File) string {
	if len(f.SourceTokens) == 0 {
		return ""
	}
	b, _ := json.Marshal(f.SourceTokens)
	return string(b)
}

// ParseTokens reads stored source tokens ("" or a JSON array).
func ParseTokens(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var t []string
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return nil, errors.New("stored source tokens do not parse")
	}
	return t, nil
}

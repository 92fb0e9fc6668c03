package transfer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// How FTS3's API shows jobs and files: every column of FTS3's t_job and
// t_file, named as FTS3 names them, times as it writes them (UTC, to
// the second, no zone), with wanda's values where it has them and FTS3's
// defaults (null, -1, "") for what it does not do (tape, space tokens,
// session reuse). A file of several sources is shown as FTS3 stores it:
// one entry per source, all of the same file_index; the one in use has
// the file's state, those tried and failed are FAILED, the others
// NOT_USED.

// ftsTime is FTS3's time format.
const ftsTime = "2006-01-02T15:04:05"

func ftsTimeOf(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(ftsTime)
}

// kv is one member of an ordered JSON object.
type kv struct {
	k string
	v any
}

// object is a JSON object whose members keep their order.
type object []kv

// MarshalJSON implements json.Marshaler.
func (o object) MarshalJSON() ([]byte, error) { return appendJSON(nil, o), nil }

// get is the value of member k.
func (o object) get(k string) (any, bool) {
	for _, m := range o {
		if m.k == k {
			return m.v, true
		}
	}
	return nil, false
}

// nullable is s, or null when empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// submitHost is this instance's host name (FTS3's submit_host).
var submitHost, _ = os.Hostname()

// jobView is a job as FTS3 shows it.
func jobView(j store.Job) object {
	p := j.Params
	verify := "n"
	switch p.VerifyChecksum {
	case "", "both":
		verify = "b"
	case "source":
		verify = "s"
	case "target":
		verify = "t"
	}
	var overwrite any
	switch {
	case p.Overwrite:
		overwrite = "Y"
	case p.OverwriteOnRetry:
		overwrite = "R"
	case p.OverwriteHop:
		overwrite = "M"
	}
	var internal []string
	if p.Streams > 0 {
		internal = append(internal, fmt.Sprintf("nostreams:%d", p.Streams))
	}
	if p.Timeout > 0 {
		internal = append(internal, fmt.Sprintf("timeout:%d", p.Timeout))
	}
	if p.StrictCopy {
		internal = append(internal, "strict")
	}
	var deadline any
	if !j.Deadline.IsZero() {
		deadline = j.Deadline.Unix()
	}
	// FTS3's jobs always have metadata (its auth_method): clients read
	// it as an object (Rucio's job_metadata.get(...)).
	meta := json.RawMessage(p.JobMetadata)
	if len(meta) == 0 || string(meta) == "null" {
		meta = json.RawMessage("{}")
	}
	return object{
		{"job_id", j.ID}, {"source_se", nullable(j.SourceSE)}, {"dest_se", nullable(j.DestSE)},
		{"job_state", j.State}, {"job_type", j.Type}, {"cancel_job", j.State == store.JobCanceled},
		{"submit_host", submitHost}, {"user_dn", j.UserDN}, {"cred_id", j.CredID}, {"vo_name", j.VO},
		{"reason", nullable(j.Reason)}, {"submit_time", ftsTimeOf(j.Created)}, {"priority", p.Priority},
		{"max_time_in_queue", deadline}, {"destination_spacetoken", ""}, {"internal_job_params", nullable(strings.Join(internal, ","))},
		{"dst_file_report", false}, {"overwrite_flag", overwrite}, {"job_finished", ftsTimeOf(j.Finished)},
		{"source_spacetoken", ""}, {"copy_pin_lifetime", -1}, {"verify_checksum", verify}, {"bring_online", -1},
		{"archive_timeout", -1}, {"target_qos", nil}, {"job_metadata", meta}, {"retry", p.Retry},
		{"retry_delay", p.RetryDelay}, {"os_project_id", nil},
	}
}

// fileEntry is one source of one file: a row of FTS3's t_file.
type fileEntry struct {
	id   int // file_id: the entry's number in the job
	f    *store.File
	alt  int
	last *store.Attempt // the last attempt from this source, for sources no longer in use
}

// entries are a job's files as FTS3's rows, in order; attempts (nil:
// not read) give the sources tried and failed their times and reason.
func entries(fs []store.File, attempts []store.Attempt) []fileEntry {
	out := make([]fileEntry, 0, len(fs))
	for i := range fs {
		f := &fs[i]
		for alt := range f.Sources {
			e := fileEntry{id: len(out), f: f, alt: alt}
			if alt != f.SourceIndex {
				for i := range attempts {
					a := &attempts[i]
					if a.Index == f.Index && a.Source == f.Sources[alt] {
						e.last = a
					}
				}
			}
			out = append(out, e)
		}
	}
	return out
}

// needAttempts reports whether showing fs needs their attempts: a file
// has a source tried before the one in use.
func needAttempts(fs []store.File) bool {
	for _, f := range fs {
		if f.Tried&^(1<<f.SourceIndex) != 0 {
			return true
		}
	}
	return false
}

func (e fileEntry) state() store.FileState {
	switch {
	case e.alt == e.f.SourceIndex:
		return e.f.State
	case e.f.Tried&(1<<e.alt) != 0:
		return store.FileFailed
	}
	return store.FileNotUsed
}

// fileFields are t_file's columns, in FTS3's order.
var fileFields = []string{"file_id", "hashed_id", "file_index", "job_id", "dest_surl_uuid", "vo_name", "source_se", "dest_se",
	"priority", "file_state", "transfer_host", "source_surl", "dest_surl", "staging_host", "reason", "recoverable",
	"filesize", "checksum", "finish_time", "start_time", "archive_start_time", "archive_finish_time",
	"internal_file_params", "pid", "tx_duration", "throughput", "retry", "user_filesize", "file_metadata",
	"staging_metadata", "archive_metadata", "staging_start", "staging_finished", "selection_strategy",
	"bringonline_token", "log_file", "log_debug", "activity", "scitag", "src_token_id", "dst_token_id",
	"file_state_initial", "transferred"}

// field is one column of the entry; ok false for a name t_file does not
// have.
func (e fileEntry) field(name string, vo string) (any, bool) {
	f := e.f
	cur := e.alt == f.SourceIndex
	var start, end time.Time
	reason := ""
	switch {
	case cur:
		start, end, reason = f.Started, f.Ended, withClass(f.ErrorClass, f.Reason)
	case e.last != nil:
		start, end, reason = e.last.Start, e.last.End, withClass(e.last.ErrorClass, e.last.Message)
	}
	switch name {
	case "file_id":
		return e.id, true
	case "file_index":
		return f.Index, true
	case "job_id":
		return f.Job, true
	case "vo_name":
		return vo, true
	case "source_se":
		return store.SEOf(f.Sources[e.alt]), true
	case "dest_se":
		return f.DestSE, true
	case "priority":
		return f.Priority, true
	case "file_state":
		return e.state(), true
	case "source_surl":
		return f.Sources[e.alt], true
	case "dest_surl":
		return f.Destination, true
	case "reason":
		if !cur && e.state() == store.FileNotUsed {
			return nil, true
		}
		return nullable(reason), true
	case "recoverable":
		return cur && f.State == store.FileSubmitted && f.Attempts > 0, true
	case "filesize":
		if cur && f.Bytes > 0 {
			return f.Bytes, true
		}
		return max(f.Filesize, 0), true
	case "user_filesize":
		return max(f.Filesize, 0), true
	case "checksum":
		if f.Checksum == "" {
			return "ADLER32", true
		}
		return f.Checksum, true
	case "start_time":
		return ftsTimeOf(start), true
	case "finish_time":
		if cur && !f.State.Final() {
			return nil, true
		}
		return ftsTimeOf(end), true
	case "tx_duration":
		if !cur || start.IsZero() || end.IsZero() {
			return nil, true
		}
		return end.Sub(start).Seconds(), true
	case "throughput":
		if !cur {
			return nil, true
		}
		return f.Rate, true
	case "transferred":
		if !cur {
			return 0, true
		}
		return f.Bytes, true
	case "retry":
		if !cur {
			return 0, true
		}
		return max(f.Attempts-1, 0), true
	case "file_metadata":
		if len(f.Metadata) == 0 {
			return nil, true
		}
		return json.RawMessage(f.Metadata), true
	case "selection_strategy":
		return f.Selection, true
	case "activity":
		return f.Activity, true
	case "hashed_id", "log_debug":
		return 0, true
	case "dest_surl_uuid", "transfer_host", "staging_host", "archive_start_time", "archive_finish_time",
		"internal_file_params", "pid", "staging_metadata", "archive_metadata", "staging_start", "staging_finished",
		"bringonline_token", "log_file", "scitag", "src_token_id", "dst_token_id", "file_state_initial":
		return nil, true
	}
	return nil, false
}

// view is the entry with the named fields (every column when names is
// nil); names t_file does not have are left out, as FTS3 does.
func (e fileEntry) view(names []string, vo string) object {
	if names == nil {
		names = fileFields
	}
	o := make(object, 0, len(names))
	for _, n := range names {
		if v, ok := e.field(n, vo); ok {
			o = append(o, kv{n, v})
		}
	}
	return o
}

// fileViews are a job's files as FTS3 shows them, with the named fields.
func (s *Service) fileViews(ctx context.Context, j store.Job, names []string) ([]object, error) {
	fs, err := s.st.Files(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	var as []store.Attempt
	if needAttempts(fs) {
		if as, err = s.st.Attempts(ctx, j.ID); err != nil {
			return nil, err
		}
	}
	es := entries(fs, as)
	out := make([]object, len(es))
	for i, e := range es {
		out[i] = e.view(names, j.VO)
	}
	return out, nil
}

// withClass is a failure's reason as FTS3's API gives it: its class
// (the stable words a program may match) before the message.
func withClass(class, msg string) string {
	if class == "" || msg == "" || strings.HasPrefix(msg, class) {
		return msg
	}
	return class + ": " + msg
}

package transfer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// The API's limits.
const (
	maxBody     = 8 << 20 // bytes of a submission
	maxFiles    = 100000  // files per job
	maxSources  = 16      // alternative sources per file
	maxURL      = 4096
	maxMetadata = 4096 // bytes of a file's or a job's metadata
	maxToken    = 16384
)

// SubmitRequest is a job as clients write it: FTS3's bulk submission
// (POST /jobs, and wanda's POST /api/v1/jobs).
type SubmitRequest struct {
	Files  []FileRequest `json:"files"`
	Params store.Params  `json:"params"`
}

// FileRequest is one file of a submission.
type FileRequest struct {
	Sources           []string        `json:"sources"`
	Destinations      []string        `json:"destinations"`
	Checksum          string          `json:"checksum,omitempty"`
	Filesize          *int64          `json:"filesize,omitempty"`
	Metadata          json.RawMessage `json:"metadata,omitempty"`
	Activity          string          `json:"activity,omitempty"`
	SelectionStrategy string          `json:"selection_strategy,omitempty"`
	SourceTokens      []string        `json:"source_tokens,omitempty"`
	DestinationTokens []string        `json:"destination_tokens,omitempty"`
}

// apiError is a refusal with its HTTP status.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{code: 400, msg: fmt.Sprintf(format, args...)}
}

// dialect is how a submission is read: FTS3's API (POST /jobs) takes
// what FTS3 takes and ignores parameters it does not know, as FTS3
// does; wanda's own (POST /api/v1/jobs) refuses unknown fields.
type dialect struct {
	fts bool
}

// selection strategies FTS3 knows; wanda ranks by queue for those it
// has no statistics for (see pickSource).
var strategies = []string{"auto", "orderly", "queue", "success", "throughput", "file-throughput", "pending-data",
	"waiting-time", "waiting-time-with-error", "duration"}

// paramKeys are the job parameters FTS3's clients send that the service
// understands or knowingly ignores (see docs/transfer.md).
var paramKeys = map[string]bool{
	"verify_checksum": true, "overwrite": true, "overwrite_on_retry": true, "overwrite_hop": true,
	"overwrite_when_only_on_disk": true, "reuse": true, "multihop": true, "retry": true, "retry_delay": true,
	"priority": true, "job_metadata": true, "max_time_in_queue": true, "id_generator": true, "sid": true,
	"bring_online": true, "copy_pin_lifetime": true, "archive_timeout": true, "target_qos": true, "strict_copy": true,
	"timeout": true, "nostreams": true, "buffer_size": true, "ipv4": true, "ipv6": true, "s3alternate": true,
	"gridftp": true, "spacetoken": true, "destination_spacetoken": true, "source_spacetoken": true,
	"dst_file_report": true, "fail_nearline": true, "disable_cleanup": true, "unmanaged_tokens": true, "account": true,
	"credential": true, "credentials": true, "checksum": true, "filesize": true, "activity": true, "file_metadata": true,
	"staging_metadata": true, "archive_metadata": true, "scitag": true, "os_project_id": true,
	// wanda's own
	"id": true, "sync": true,
}

// rawJob is a submission as decoded: the fields whose JSON types FTS3's
// clients vary (null, numbers as strings, strings or objects) are kept
// raw and read by parseFile and parseParams.
type rawJob struct {
	Files   []rawFile                  `json:"files"`
	Params  map[string]json.RawMessage `json:"params"`
	Delete  json.RawMessage            `json:"delete"`
	Staging json.RawMessage            `json:"staging"`
}

type rawFile struct {
	Sources           []string        `json:"sources"`
	Destinations      []string        `json:"destinations"`
	SourceTokens      []string        `json:"source_tokens"`
	DestinationTokens []string        `json:"destination_tokens"`
	Checksum          json.RawMessage `json:"checksum"`
	Filesize          json.RawMessage `json:"filesize"`
	Metadata          json.RawMessage `json:"metadata"`
	Activity          json.RawMessage `json:"activity"`
	Selection         json.RawMessage `json:"selection_strategy"`
	Scitag            json.RawMessage `json:"scitag"`
	StagingMetadata   json.RawMessage `json:"staging_metadata"`
	ArchiveMetadata   json.RawMessage `json:"archive_metadata"`
}

// parseSubmission reads a job as id submits it. Nothing is stored: an
// error (an *apiError: 400, 403, 413) refuses the whole job.
func (s *Service) parseSubmission(body []byte, id Identity, d dialect) (store.Job, []store.File, error) {
	var raw rawJob
	dec := json.NewDecoder(bytes.NewReader(body))
	if !d.fts {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(&raw); err != nil {
		return store.Job{}, nil, badRequest("the job is not a JSON object of FTS3's form ({\"files\": [{\"sources\": [...], \"destinations\": [...]}], \"params\": {...}}): %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return store.Job{}, nil, badRequest("the job is not one JSON object (something follows it)")
	}
	for k, v := range map[string]json.RawMessage{"delete": raw.Delete, "staging": raw.Staging} {
		if !isNull(v) {
			return store.Job{}, nil, badRequest("%q: deletion and staging jobs are not supported (there is no tape; delete with the storage's own interface)", k)
		}
	}
	switch {
	case raw.Files == nil:
		return store.Job{}, nil, badRequest("no transfers: give files: [{\"sources\": [...], \"destinations\": [...]}]")
	case len(raw.Files) == 0:
		return store.Job{}, nil, badRequest("no files: give files: [{\"sources\": [...], \"destinations\": [...]}]")
	case len(raw.Files) > maxFiles:
		return store.Job{}, nil, badRequest("%d files: at most %d per job", len(raw.Files), maxFiles)
	}
	job, err := s.parseParams(raw.Params, id, d)
	if err != nil {
		return store.Job{}, nil, err
	}
	files := make([]store.File, 0, len(raw.Files))
	anyTokens := false
	for _, rf := range raw.Files {
		anyTokens = anyTokens || rf.SourceTokens != nil || rf.DestinationTokens != nil
	}
	for i := range raw.Files {
		f, err := s.parseFile(&raw.Files[i])
		if err != nil {
			return store.Job{}, nil, prefixErr(fmt.Sprintf("files[%d]", i), err)
		}
		if d.fts && !anyTokens && id.Method == "oauth2" && id.Token != "" {
			// FTS3's "single token" submissions: the submitter's token
			// goes to the sources and the destination.
			f.SourceTokens = make([]string, len(f.Sources))
			for k := range f.SourceTokens {
				f.SourceTokens[k] = id.Token
			}
			f.DestToken = id.Token
		}
		f.Priority, f.Submitter = job.Params.Priority, job.Submitter
		files = append(files, f)
	}
	if err := s.shapeJob(&job, files); err != nil {
		return store.Job{}, nil, err
	}
	return job, files, nil
}

// prefixErr puts where in front of an API error's message.
func prefixErr(where string, err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return &apiError{code: ae.code, msg: where + ": " + ae.msg}
	}
	return fmt.Errorf("%s: %w", where, err)
}

// parseParams reads a job's parameters.
func (s *Service) parseParams(raw map[string]json.RawMessage, id Identity, d dialect) (store.Job, error) {
	var p store.Params
	job := store.Job{Submitter: id.Key, UserDN: id.DN, VO: id.VO(), CredID: id.DelegationID, State: store.JobSubmitted}
	for k := range raw {
		if !paramKeys[k] && !d.fts {
			return job, badRequest("params: unknown parameter %q", k)
		}
	}
	var err error
	flag := func(k string) bool {
		b, e := parseFlag(raw[k])
		if e != nil && err == nil {
			err = badRequest("params.%s: %v", k, e)
		}
		return b
	}
	integer := func(k string, lo, hi, def int) int {
		n, ok, e := parseInt(raw[k])
		switch {
		case e != nil && err == nil:
			err = badRequest("params.%s: %v", k, e)
		case !ok:
			return def
		case (n < lo || n > hi) && err == nil:
			err = badRequest("params.%s %d: %d to %d", k, n, lo, hi)
		}
		return n
	}
	p.VerifyChecksum = "" // set by shapeJob from verify_checksum and the files' checksums
	p.Overwrite = flag("overwrite")
	p.OverwriteOnRetry = flag("overwrite_on_retry")
	hopOverwrite := flag("overwrite_hop")
	if flag("overwrite_when_only_on_disk") {
		return job, badRequest("params.overwrite_when_only_on_disk: it needs archive_timeout, and there is no tape here")
	}
	if n := btoi(p.Overwrite) + btoi(p.OverwriteOnRetry) + btoi(hopOverwrite); n > 1 {
		return job, badRequest("params: overwrite, overwrite_on_retry and overwrite_hop exclude each other")
	}
	p.Multihop = flag("multihop")
	if hopOverwrite && !p.Multihop {
		return job, badRequest("params.overwrite_hop: it needs a multihop job")
	}
	p.OverwriteHop = hopOverwrite
	flag("reuse") // a hint to share one session: connections are reused anyway
	p.StrictCopy = flag("strict_copy")
	p.Sync = flag("sync")
	p.Retry = max(integer("retry", math.MinInt32, 100, 0), 0) // FTS3: negative means none
	p.RetryDelay = integer("retry_delay", 0, 86400, 0)
	p.Priority = integer("priority", 1, 5, 3)
	p.Timeout = integer("timeout", 0, 7*86400, 0)
	p.Streams = integer("nostreams", 0, 100, 0)
	if d.fts && p.Streams == 1 {
		p.Streams = 0 // FTS3's bindings send 1 by default: the service's choice
	}
	for _, k := range []string{"bring_online", "archive_timeout"} {
		if n := integer(k, math.MinInt32, math.MaxInt32, -1); n > 0 && err == nil {
			return job, badRequest("params.%s %d: staging from and archiving to tape are not supported (there is no tape)", k, n)
		}
	}
	integer("copy_pin_lifetime", math.MinInt32, math.MaxInt32, -1) // a pin for a staging: nothing to pin without bring_online
	for _, k := range []string{"target_qos", "credential", "credentials"} {
		if v, ok := raw[k]; ok && !isNull(v) && string(v) != `""` {
			return job, badRequest("params.%s: not supported (QoS transitions and cloud storage credentials)", k)
		}
	}
	if err != nil {
		return job, err
	}
	if v, ok := raw["job_metadata"]; ok {
		if p.JobMetadata, err = metadata(v); err != nil {
			return job, badRequest("params.job_metadata: %v", err)
		}
	}
	if d.fts {
		// FTS3 notes how the job was submitted in its metadata.
		var m map[string]json.RawMessage
		_ = json.Unmarshal(orNull(p.JobMetadata), &m)
		if m == nil {
			m = map[string]json.RawMessage{}
		}
		if _, ok := m["auth_method"]; !ok {
			m["auth_method"], _ = json.Marshal(id.Method)
		}
		p.JobMetadata, _ = json.Marshal(m)
	}
	if v, ok := raw["max_time_in_queue"]; ok && !isNull(v) {
		secs, e := queueSeconds(v)
		if e != nil {
			return job, badRequest("params.max_time_in_queue: %v", e)
		}
		if secs > 0 {
			job.Deadline = s.now().Add(time.Duration(secs) * time.Second)
		}
	}
	gen := "standard"
	if v, ok := raw["id_generator"]; ok && !isNull(v) {
		if json.Unmarshal(v, &gen) != nil || gen != "standard" && gen != "deterministic" {
			return job, badRequest("params.id_generator %s: standard or deterministic", v)
		}
	}
	if gen == "deterministic" {
		sid, ok := stringOf(raw["sid"])
		if !ok || sid == "" {
			return job, badRequest("params.sid: a deterministic job id needs a sid")
		}
		p.ID = DeterministicID(job.VO, sid)
	} else if v, ok := raw["id"]; ok && !isNull(v) {
		if json.Unmarshal(v, &p.ID) != nil || !idPattern.MatchString(p.ID) {
			return job, badRequest("params.id %s: 1-128 letters, digits, '.', '_' or '-'", v)
		}
	}
	if v, ok := raw["verify_checksum"]; ok && !isNull(v) {
		mode, e := verifyMode(v)
		if e != nil {
			return job, badRequest("params.verify_checksum %s: %v", v, e)
		}
		p.VerifyChecksum = mode
	} else if d.fts {
		p.VerifyChecksum = "off" // FTS3's default: false
	}
	job.Params, job.ID = p, p.ID
	return job, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// verifyMode reads verify_checksum: none, source, target, both (or their
// first letters, as FTS3's command line sends them), or a boolean:
// true is both, false "off" (then decided by the files' checksums).
func verifyMode(v json.RawMessage) (string, error) {
	var b bool
	if json.Unmarshal(v, &b) == nil {
		if b {
			return "both", nil
		}
		return "off", nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", errors.New("want none, source, target, both or a boolean")
	}
	for _, m := range []string{"none", "source", "target", "both"} {
		if strings.EqualFold(s, m) || len(s) == 1 && strings.EqualFold(s, m[:1]) {
			return m, nil
		}
	}
	switch strings.ToLower(s) {
	case "true", "y", "yes":
		return "both", nil
	case "false", "no", "":
		return "off", nil
	}
	return "", errors.New("want none, source, target, both or a boolean")
}

// shapeJob decides what depends on the job as a whole: its type, the
// hops' states, checksum verification, the job's storages.
func (s *Service) shapeJob(j *store.Job, files []store.File) error {
	p := &j.Params
	replicas := false
	for _, f := range files {
		replicas = replicas || len(f.Sources) > 1
	}
	switch {
	case p.Multihop && replicas:
		return badRequest("a multihop job's hops have one source each (alternative sources and multihop exclude each other)")
	case p.Multihop:
		j.Type = store.TypeMultihop
		p.Hops = len(files)
		for i := 1; i < len(files); i++ {
			files[i].State = store.FileNotUsed
		}
	case replicas:
		j.Type = store.TypeReplicas
	default:
		j.Type = store.TypeRegular
	}
	// FTS3's rule: verify_checksum false means "target" when a file has a
	// checksum, "none" otherwise. Unset (wanda's API), it is "both".
	if p.VerifyChecksum == "off" {
		p.VerifyChecksum = "none"
		for _, f := range files {
			if f.Checksum != "" {
				p.VerifyChecksum = "target"
			}
		}
	}
	if p.StrictCopy {
		p.VerifyChecksum = "none"
	}
	j.SourceSE, j.DestSE = files[0].SourceSE, files[0].DestSE
	if j.Type == store.TypeMultihop {
		j.DestSE = files[len(files)-1].DestSE
		return nil
	}
	for _, f := range files {
		if f.SourceSE != j.SourceSE {
			j.SourceSE = ""
		}
		if f.DestSE != j.DestSE {
			j.DestSE = ""
		}
	}
	return nil
}

// parseFile reads one file of a submission.
func (s *Service) parseFile(rf *rawFile) (store.File, error) {
	var f store.File
	if len(rf.Sources) == 0 || len(rf.Sources) > maxSources {
		return f, badRequest("%d sources: 1 to %d (alternatives)", len(rf.Sources), maxSources)
	}
	if len(rf.Destinations) != 1 {
		return f, badRequest("%d destinations: exactly one per file", len(rf.Destinations))
	}
	f.Sources = rf.Sources
	f.Destination = strings.TrimSpace(rf.Destinations[0])
	srcs := make([]*url.URL, len(f.Sources))
	for i := range f.Sources {
		f.Sources[i] = strings.TrimSpace(f.Sources[i])
		u, err := checkURL(f.Sources[i])
		if err != nil {
			return f, badRequest("sources[%d]: %v", i, err)
		}
		srcs[i] = u
	}
	dst, err := checkURL(f.Destination)
	if err != nil {
		return f, badRequest("destinations[0]: %v", err)
	}
	if f.SourceTokens, f.DestToken, err = parseTokens(rf.SourceTokens, rf.DestinationTokens, len(f.Sources)); err != nil {
		return f, err
	}
	if f.DestToken != "" {
		for _, u := range append(srcs, dst) {
			if u.Scheme == "root" || u.Scheme == "roots" {
				return f, badRequest("%s: tokens go to http(s) and dav(s) storages; a root:// URL with tokens is not supported (name the storage's WebDAV door, davs://)", redact(u.String()))
			}
		}
	}
	if v, ok := stringOf(rf.Checksum); ok {
		if _, _, err := parseChecksum(v); err != nil {
			return f, badRequest("%v", err)
		}
		f.Checksum = v
	} else if !isNull(rf.Checksum) {
		return f, badRequest("checksum: want \"ALG:HEX\" or \"ALG\"")
	}
	f.Filesize = -1
	if v := rf.Filesize; !isNull(v) {
		var x float64
		if json.Unmarshal(v, &x) != nil || x < 0 || x > 1<<62 {
			return f, badRequest("filesize %s: a number of bytes, not negative", v)
		}
		f.Filesize = int64(x)
	}
	if f.Metadata, err = metadata(rf.Metadata); err != nil {
		return f, badRequest("metadata: %v", err)
	}
	if v, ok := stringOf(rf.Activity); ok && v != "" {
		f.Activity = v
	}
	f.Selection = "auto"
	if v, ok := stringOf(rf.Selection); ok && v != "" {
		if !slices.Contains(strategies, v) {
			return f, badRequest("selection_strategy %q: one of %s", v, strings.Join(strategies, ", "))
		}
		f.Selection = v
	}
	if v := rf.Scitag; !isNull(v) {
		n, _, err := parseInt(v)
		if err != nil || n < 65 || n > 65535 {
			return f, badRequest("scitag %s: an integer from 65 to 65535", v)
		}
	}
	for k, v := range map[string]json.RawMessage{"staging_metadata": rf.StagingMetadata, "archive_metadata": rf.ArchiveMetadata} {
		if !isNull(v) {
			return f, badRequest("%s: staging and archiving are not supported (there is no tape)", k)
		}
	}
	f.State = store.FileSubmitted
	f.SourceIndex = s.pickSource(f)
	f.Link = store.LinkOfURL(srcs[f.SourceIndex], dst)
	f.SourceSE, f.DestSE = store.SEOfURL(srcs[f.SourceIndex]), store.SEOfURL(dst)
	return f, nil
}

// parseTokens reads a file's source_tokens and destination_tokens:
// both or neither, one per source and one for the destination, each a
// non-empty string; a JWT that has expired is refused (an opaque token
// is taken as it is: only its storage can judge it).
func parseTokens(src, dst []string, sources int) ([]string, string, error) {
	switch {
	case len(src) == 0 && len(dst) == 0:
		return nil, "", nil
	case len(src) == 0 || len(dst) == 0:
		return nil, "", badRequest("source_tokens and destination_tokens go together: give both or neither")
	case len(src) != sources:
		return nil, "", badRequest("%d source_tokens for %d sources: one per source", len(src), sources)
	case len(dst) != 1:
		return nil, "", badRequest("%d destination_tokens: one, for the destination", len(dst))
	}
	for i, t := range append(slices.Clone(src), dst[0]) {
		what := fmt.Sprintf("source_tokens[%d]", i)
		if i == len(src) {
			what = "destination_tokens[0]"
		}
		if t == "" || len(t) > maxToken || strings.ContainsAny(t, " \t\r\n") {
			return nil, "", badRequest("%s: not a token (empty, too long, or with white space)", what)
		}
		if exp, ok := jwtExpiry(t); ok && exp.Before(time.Now()) {
			return nil, "", badRequest("%s expired at %s: get a fresh token", what, exp.UTC().Format(time.RFC3339))
		}
	}
	return src, dst[0], nil
}

// jwtExpiry reads a JWT's exp claim, without verifying it (the storages
// do: the service never acts on a token's claims).
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil || c.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(int64(*c.Exp), 0), true
}

// checkURL refuses what the service cannot or must not copy: other
// schemes, no host, credentials in the URL, control characters.
func checkURL(raw string) (*url.URL, error) {
	if len(raw) > maxURL {
		return nil, fmt.Errorf("a URL of %d bytes: at most %d", len(raw), maxURL)
	}
	if strings.IndexFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return nil, errors.New("a URL with control characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	switch u.Scheme {
	case "http", "https", "davs", "dav", "root", "roots":
	default:
		return nil, fmt.Errorf("scheme %q: http, https, dav, davs, root or roots", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("a URL without a host")
	}
	if u.User != nil || client.Redact(u) != u.String() {
		// Stored and shown to API users: no credential may ride in it.
		return nil, errors.New("a URL with credentials in it (user:password@, authz=, access_token=, a presigned signature): give tokens in source_tokens and destination_tokens")
	}
	if u.Path == "" || strings.HasSuffix(u.Path, "/") {
		return nil, fmt.Errorf("%s: a file's URL, not a directory's", redact(raw))
	}
	return u, nil
}

// metadata reads FTS3's metadata: a JSON object, or a string (kept as
// {"label": ...}); null is none. v was decoded as a whole before, so it
// is valid JSON.
func metadata(v json.RawMessage) (json.RawMessage, error) {
	v = bytes.TrimSpace(v)
	if isNull(v) {
		return nil, nil
	}
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, err
		}
		v, _ = json.Marshal(map[string]string{"label": s})
	case '{':
	default:
		return nil, errors.New("want a JSON object or a string")
	}
	if len(v) > maxMetadata {
		return nil, fmt.Errorf("%d bytes: at most %d", len(v), maxMetadata)
	}
	var buf bytes.Buffer
	buf.Grow(len(v))
	if err := json.Compact(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// queueSeconds reads max_time_in_queue: an integer of hours, or a number
// with a unit ("90s", "30m", "2h", "1d").
func queueSeconds(v json.RawMessage) (int, error) {
	var n float64
	if json.Unmarshal(v, &n) == nil {
		if n < 0 || n > 1e6 {
			return 0, fmt.Errorf("%v hours: 0 to a million", n)
		}
		return int(n * 3600), nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil || s == "" {
		return 0, errors.New("want hours, or a number with s, m, h or d")
	}
	mult := map[byte]int{'s': 1, 'm': 60, 'h': 3600, 'd': 86400}[s[len(s)-1]|0x20]
	num, err := strconv.Atoi(s[:len(s)-1])
	if mult == 0 {
		mult, err = 3600, nil
		if num, err = strconv.Atoi(s); err != nil {
			return 0, errors.New("want hours, or a number with s, m, h or d")
		}
	}
	if err != nil || num < 0 || num > 1e7 {
		return 0, fmt.Errorf("%q: want hours, or a number with s, m, h or d", s)
	}
	return num * mult, nil
}

// parseFlag reads a flag as FTS3's clients send them: a boolean, a
// number, "Y"/"N", "true"/"false"; null is false.
func parseFlag(v json.RawMessage) (bool, error) {
	if isNull(v) {
		return false, nil
	}
	var b bool
	if json.Unmarshal(v, &b) == nil {
		return b, nil
	}
	var n float64
	if json.Unmarshal(v, &n) == nil {
		return n != 0, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		switch strings.ToLower(s) {
		case "y", "yes", "true", "1":
			return true, nil
		case "n", "no", "false", "0", "":
			return false, nil
		}
	}
	return false, fmt.Errorf("%s: want true or false", v)
}

// parseInt reads an integer (a JSON number or a string of one); ok false
// for null or absent.
func parseInt(v json.RawMessage) (n int, ok bool, err error) {
	if isNull(v) {
		return 0, false, nil
	}
	var f float64
	if json.Unmarshal(v, &f) == nil {
		if f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
			return 0, false, fmt.Errorf("%s: want an integer", v)
		}
		return int(f), true, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return 0, false, fmt.Errorf("%q: want an integer", s)
		}
		return n, true, nil
	}
	return 0, false, fmt.Errorf("%s: want an integer", v)
}

// stringOf reads a JSON string; ok false for anything else.
func stringOf(v json.RawMessage) (string, bool) {
	var s string
	if isNull(v) || json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

func isNull(v json.RawMessage) bool {
	return len(bytes.TrimSpace(v)) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// orNull is v, or null when absent.
func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

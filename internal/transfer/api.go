package transfer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// The API's limits.
const (
	maxBody    = 4 << 20 // bytes of a submission
	maxFiles   = 100000  // files per job
	maxSources = 16      // alternative sources per file
	maxURL     = 4096
)

// SubmitRequest is the body of POST /api/v1/jobs (FTS3's form).
type SubmitRequest struct {
	Files  []FileRequest `json:"files"`
	Params store.Params  `json:"params"`
}

// FileRequest is one file of a submission.
type FileRequest struct {
	Sources      []string        `json:"sources"`
	Destinations []string        `json:"destinations"`
	Checksum     string          `json:"checksum,omitempty"`
	Filesize     *int64          `json:"filesize,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// FilesResponse is the body of GET /api/v1/jobs/{id}/files.
type FilesResponse struct {
	Files    []FileStatus    `json:"files"`
	Attempts []store.Attempt `json:"attempts"`
}

// FileStatus is a file with the bytes moved so far when it is in flight
// on the instance that answers.
type FileStatus struct {
	store.File
	Progress *int64 `json:"progress_bytes,omitempty"`
}

// Handler serves the API under /api/v1/. subject names the requester
// (the verified token's subject), "" for anonymous.
func (s *Service) Handler(subject func(*http.Request) string) http.Handler {
	if subject == nil {
		subject = func(*http.Request) string { return "" }
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) { s.submit(w, r, subject(r)) })
	mux.HandleFunc("GET /api/v1/jobs", s.list)
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.job)
	mux.HandleFunc("GET /api/v1/jobs/{id}/files", s.files)
	mux.HandleFunc("DELETE /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) { s.cancel(w, r, subject(r)) })
	mux.HandleFunc("GET /api/v1/links", s.links)
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "no such API: %s %s (POST/GET /api/v1/jobs, GET/DELETE /api/v1/jobs/ID, GET /api/v1/jobs/ID/files, GET /api/v1/links)", r.Method, r.URL.Path)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// apiError answers {"error": "..."}.
func apiError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (s *Service) submit(w http.ResponseWriter, r *http.Request, subject string) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		apiError(w, http.StatusUnsupportedMediaType, "the job is JSON (Content-Type: application/json), not %q", ct)
		return
	}
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var req SubmitRequest
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			apiError(w, http.StatusRequestEntityTooLarge, "the job is larger than %d bytes: submit it as several jobs", maxBody)
			return
		}
		apiError(w, http.StatusBadRequest, "the job is not valid JSON: %v", err)
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		apiError(w, http.StatusBadRequest, "the job is not one JSON object (something follows it)")
		return
	}
	job, files, err := s.validate(req, subject)
	if err != nil {
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	stored, created, err := s.st.Submit(r.Context(), job, files)
	if err != nil {
		s.log.Error("storing a job", "err", err)
		apiError(w, http.StatusInternalServerError, "storing the job failed")
		return
	}
	code := http.StatusCreated
	if !created {
		if stored.Submitter != job.Submitter {
			apiError(w, http.StatusConflict, "job id %s is taken by another submitter's job: choose another id", stored.ID)
			return
		}
		code = http.StatusOK // the same id again: the job as it is
	}
	if created && s.o.Metrics != nil {
		s.o.Metrics.Jobs.Inc()
	}
	s.log.Info("job submitted", "job", stored.ID, "files", len(files), "submitter", stored.Submitter, "new", created)
	s.Kick()
	writeJSON(w, code, map[string]any{"job_id": stored.ID, "state": stored.State})
}

// validate checks a submission and makes the job and its files.
func (s *Service) validate(req SubmitRequest, subject string) (store.Job, []store.File, error) {
	p := req.Params
	switch {
	case len(req.Files) == 0:
		return store.Job{}, nil, errors.New("no files: give files: [{sources: [...], destinations: [...]}]")
	case len(req.Files) > maxFiles:
		return store.Job{}, nil, fmt.Errorf("%d files: at most %d per job", len(req.Files), maxFiles)
	}
	switch p.VerifyChecksum {
	case "", "none", "source", "target", "both":
	default:
		return store.Job{}, nil, fmt.Errorf("params.verify_checksum %q: none, source, target or both", p.VerifyChecksum)
	}
	if p.Priority == 0 {
		p.Priority = 3
	}
	if p.Priority < 1 || p.Priority > 5 {
		return store.Job{}, nil, fmt.Errorf("params.priority %d: 1 to 5", p.Priority)
	}
	if p.Retry < 0 || p.Retry > 100 || p.RetryDelay < 0 || p.RetryDelay > 86400 {
		return store.Job{}, nil, errors.New("params.retry: 0 to 100; params.retry_delay: 0 to 86400 seconds")
	}
	if p.ID == "" {
		p.ID = newID()
	} else if !idPattern.MatchString(p.ID) {
		return store.Job{}, nil, fmt.Errorf("params.id %q: 1-128 letters, digits, '.', '_' or '-'", p.ID)
	}
	if subject == "" {
		subject = "anonymous"
	}
	job := store.Job{ID: p.ID, Submitter: subject, State: store.JobSubmitted, Params: p}
	files := make([]store.File, 0, len(req.Files))
	for i, fr := range req.Files {
		f, err := s.validateFile(fr, p, subject)
		if err != nil {
			return store.Job{}, nil, fmt.Errorf("files[%d]: %w", i, err)
		}
		files = append(files, f)
	}
	return job, files, nil
}

func (s *Service) validateFile(fr FileRequest, p store.Params, subject string) (store.File, error) {
	if len(fr.Sources) == 0 || len(fr.Sources) > maxSources {
		return store.File{}, fmt.Errorf("%d sources: 1 to %d (alternatives, tried in order)", len(fr.Sources), maxSources)
	}
	if len(fr.Destinations) != 1 {
		return store.File{}, fmt.Errorf("%d destinations: exactly one per file", len(fr.Destinations))
	}
	var src0 *url.URL
	for i, raw := range fr.Sources {
		u, err := checkURL(raw)
		if err != nil {
			return store.File{}, fmt.Errorf("sources[%d]: %w", i, err)
		}
		if i == 0 {
			src0 = u
		}
	}
	dst, err := checkURL(fr.Destinations[0])
	if err != nil {
		return store.File{}, fmt.Errorf("destinations[0]: %w", err)
	}
	if _, _, err := parseChecksum(fr.Checksum); err != nil {
		return store.File{}, err
	}
	size := int64(-1)
	if fr.Filesize != nil {
		if *fr.Filesize < 0 {
			return store.File{}, fmt.Errorf("filesize %d: not negative", *fr.Filesize)
		}
		size = *fr.Filesize
	}
	if len(fr.Metadata) > 4096 {
		return store.File{}, errors.New("metadata: at most 4096 bytes")
	}
	return store.File{
		Sources: fr.Sources, Destination: fr.Destinations[0], Checksum: fr.Checksum, Filesize: size, Metadata: fr.Metadata,
		Link: strings.ToLower(src0.Host) + " -> " + strings.ToLower(dst.Host), Priority: p.Priority, Submitter: subject,
		State: store.FileSubmitted,
	}, nil
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
	case "http", "https", "root", "roots":
	default:
		return nil, fmt.Errorf("scheme %q: http, https, root or roots", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("a URL without a host")
	}
	if u.User != nil || client.Redact(u) != u.String() {
		// Stored and shown to API users: no credential may ride in it.
		return nil, errors.New("a URL with credentials in it (user:password@, authz=, access_token=, a presigned signature): the service uses its own")
	}
	if u.Path == "" || strings.HasSuffix(u.Path, "/") {
		return nil, fmt.Errorf("%s: a file's URL, not a directory's", redact(raw))
	}
	return u, nil
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *Service) job(w http.ResponseWriter, r *http.Request) {
	j, err := s.st.Job(r.Context(), r.PathValue("id"))
	if s.storeErr(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Service) files(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	fs, err := s.st.Files(r.Context(), id)
	if s.storeErr(w, err) {
		return
	}
	as, err := s.st.Attempts(r.Context(), id)
	if s.storeErr(w, err) {
		return
	}
	out := FilesResponse{Files: make([]FileStatus, len(fs)), Attempts: as}
	for i, f := range fs {
		out.Files[i].File = f
		if n, ok := s.Progress(f.FileKey); ok {
			out.Files[i].Progress = &n
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) list(w http.ResponseWriter, r *http.Request) {
	var q store.JobQuery
	if v := r.URL.Query().Get("state"); v != "" {
		for st := range strings.SplitSeq(v, ",") {
			js := store.JobState(strings.ToUpper(strings.TrimSpace(st)))
			switch js {
			case store.JobSubmitted, store.JobActive, store.JobFinished, store.JobFinishedDirty, store.JobFailed, store.JobCanceled:
			default:
				apiError(w, http.StatusBadRequest, "state %q: SUBMITTED, ACTIVE, FINISHED, FINISHEDDIRTY, FAILED or CANCELED", st)
				return
			}
			q.States = append(q.States, js)
		}
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			apiError(w, http.StatusBadRequest, "limit %q: 1 to 10000", v)
			return
		}
		q.Limit = n
	}
	jobs, err := s.st.ListJobs(r.Context(), q)
	if s.storeErr(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
}

func (s *Service) cancel(w http.ResponseWriter, r *http.Request, subject string) {
	id := r.PathValue("id")
	j, err := s.st.Job(r.Context(), id)
	if s.storeErr(w, err) {
		return
	}
	if j.Submitter != "anonymous" && j.Submitter != subject {
		apiError(w, http.StatusForbidden, "job %s was submitted by another identity: only its submitter may cancel it", id)
		return
	}
	prev := j.State
	j, err = s.st.Cancel(r.Context(), id)
	if errors.Is(err, store.ErrFinal) {
		apiError(w, http.StatusConflict, "job %s has ended already (%s)", id, prev)
		return
	}
	if s.storeErr(w, err) {
		return
	}
	s.log.Info("job canceled", "job", id)
	writeJSON(w, http.StatusOK, j)
}

func (s *Service) links(w http.ResponseWriter, r *http.Request) {
	infos, err := s.Links(r.Context(), 10)
	if s.storeErr(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"links": infos})
}

// Links is the optimizer's view of every link, with its latest
// decisions (at most n each, newest first).
func (s *Service) Links(ctx context.Context, n int) ([]LinkInfo, error) {
	infos := s.opt.snapshot()
	for i := range infos {
		ds, err := s.st.Decisions(ctx, infos[i].Link, n)
		if err != nil {
			return nil, err
		}
		infos[i].Decisions = ds
	}
	return infos, nil
}

// Jobs is the latest jobs of every submitter, newest first (at most n).
func (s *Service) Jobs(ctx context.Context, n int) ([]store.Job, error) {
	return s.st.ListJobs(ctx, store.JobQuery{Limit: n})
}

// storeErr answers a store error; it reports whether there was one.
func (s *Service) storeErr(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, store.ErrNotFound):
		apiError(w, http.StatusNotFound, "no such job")
	default:
		s.log.Error("store", "err", err)
		apiError(w, http.StatusInternalServerError, "the store failed")
	}
	return true
}

package transfer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// wanda's own API under /api/v1/: what `wanda transfer` and its
// dashboard read (jobs as the store keeps them, with their files'
// counts and attempts, and the optimizer's links). Submissions take
// FTS3's form, parsed by the same code as FTS3's API, but unknown fields
// are refused and a client-chosen params.id makes them idempotent.

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

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (s *Service) routeV1(mux *http.ServeMux, auth Authenticator) {
	mux.Handle("POST /api/v1/jobs", s.serve(auth, s.v1Submit))
	mux.Handle("GET /api/v1/jobs", s.serve(auth, s.v1List))
	mux.Handle("GET /api/v1/jobs/{id}", s.serve(auth, s.v1Job))
	mux.Handle("GET /api/v1/jobs/{id}/files", s.serve(auth, s.v1Files))
	mux.Handle("DELETE /api/v1/jobs/{id}", s.serve(auth, s.v1Cancel))
	mux.Handle("GET /api/v1/links", s.serve(auth, s.v1Links))
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such API: %s %s (POST/GET /api/v1/jobs, GET/DELETE /api/v1/jobs/ID, GET /api/v1/jobs/ID/files, GET /api/v1/links; FTS3's API at /jobs)", r.Method, r.URL.Path))
	})
}

func (s *Service) v1Submit(w http.ResponseWriter, r *http.Request, id Identity) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	job, files, err := s.parseSubmission(body, id, dialect{})
	if err != nil {
		return err
	}
	stored, created, err := s.submit(r.Context(), job, files)
	if err != nil {
		return err
	}
	code := http.StatusCreated
	if !created {
		if stored.Submitter != job.Submitter {
			return &apiError{code: http.StatusConflict, msg: fmt.Sprintf("job id %s is taken by another submitter's job: choose another id", stored.ID)}
		}
		code = http.StatusOK // the same id again: the job as it is
	}
	writeJSON(w, code, map[string]any{"job_id": stored.ID, "state": stored.State})
	return nil
}

func (s *Service) v1Job(w http.ResponseWriter, r *http.Request, _ Identity) error {
	j, err := s.st.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

func (s *Service) v1Files(w http.ResponseWriter, r *http.Request, _ Identity) error {
	id := r.PathValue("id")
	fs, err := s.st.Files(r.Context(), id)
	if err != nil {
		return err
	}
	as, err := s.st.Attempts(r.Context(), id)
	if err != nil {
		return err
	}
	out := FilesResponse{Files: make([]FileStatus, len(fs)), Attempts: as}
	for i, f := range fs {
		out.Files[i].File = f
		if n, ok := s.Progress(f.FileKey); ok {
			out.Files[i].Progress = &n
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Service) v1List(w http.ResponseWriter, r *http.Request, _ Identity) error {
	var q store.JobQuery
	if v := r.URL.Query().Get("state"); v != "" {
		states, err := parseStates(v)
		if err != nil {
			return err
		}
		q.States = states
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return badRequest("limit %q: 1 to 10000", v)
		}
		q.Limit = n
	}
	jobs, err := s.st.ListJobs(r.Context(), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
	return nil
}

// parseStates reads a comma-separated list of job states.
func parseStates(v string) ([]store.JobState, error) {
	var out []store.JobState
	for st := range strings.SplitSeq(v, ",") {
		js := store.JobState(strings.ToUpper(strings.TrimSpace(st)))
		if js == "" {
			continue
		}
		ok := false
		for _, k := range store.JobStates {
			ok = ok || k == js
		}
		if !ok {
			return nil, badRequest("state %q: one of SUBMITTED, READY, ACTIVE, FINISHED, FINISHEDDIRTY, FAILED, CANCELED", st)
		}
		out = append(out, js)
	}
	return out, nil
}

func (s *Service) v1Cancel(w http.ResponseWriter, r *http.Request, id Identity) error {
	jid := r.PathValue("id")
	j, err := s.st.Job(r.Context(), jid)
	if err != nil {
		return err
	}
	if err := mayChange(id, j); err != nil {
		return err
	}
	j, err = s.cancel(r.Context(), jid)
	if errors.Is(err, store.ErrFinal) {
		return &apiError{code: http.StatusConflict, msg: fmt.Sprintf("job %s has ended already (%s)", jid, j.State)}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// cancel cancels a job (ErrFinal with the job when it had ended).
func (s *Service) cancel(ctx context.Context, id string) (store.Job, error) {
	j, err := s.st.Cancel(ctx, id, "job canceled by its submitter")
	if err == nil {
		s.log.Info("job canceled", "job", id)
	}
	return j, err
}

func (s *Service) v1Links(w http.ResponseWriter, r *http.Request, _ Identity) error {
	infos, err := s.Links(r.Context(), 10)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"links": infos})
	return nil
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

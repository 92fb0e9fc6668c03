package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// FTS3's REST API (as fts-rest-flask serves it, API 3.13), at FTS3's
// paths: what Rucio's FTS3 transfertool, the fts-rest-* commands and the
// fts3.rest.client bindings send and read. Jobs and files are the
// service's own (store), shown as FTS3 shows them (fts3view.go).

// maxList bounds GET /jobs with a limit, as FTS3 does.
const maxList = 500

func (s *Service) routeFTS(mux *http.ServeMux, auth Authenticator) {
	mux.Handle("GET /{$}", s.serve(auth, s.ftsRoot))
	mux.Handle("GET /whoami", s.serve(auth, s.ftsWhoami))
	mux.Handle("GET /jobs", s.serve(auth, s.ftsList))
	mux.Handle("GET /jobs/{$}", s.serve(auth, s.ftsList))
	mux.Handle("POST /jobs", s.serve(auth, s.ftsSubmit))
	mux.Handle("PUT /jobs", s.serve(auth, s.ftsSubmit))
	mux.Handle("GET /jobs/{ids}", s.serve(auth, s.ftsJobs))
	mux.Handle("DELETE /jobs/{ids}", s.serve(auth, s.ftsCancel))
	mux.Handle("POST /jobs/{ids}", s.serve(auth, s.ftsModify))
	mux.Handle("GET /jobs/{id}/files", s.serve(auth, s.ftsFiles))
	mux.Handle("DELETE /jobs/{id}/files/{fids}", s.serve(auth, s.ftsCancelFiles))
	mux.Handle("GET /jobs/{id}/files/{fid}/retries", s.serve(auth, s.ftsRetries))
	mux.Handle("GET /jobs/{id}/dm", s.serve(auth, s.ftsDM))
	mux.Handle("GET /jobs/{id}/{field}", s.serve(auth, s.ftsField))
	mux.Handle("GET /ban/se", s.serve(auth, s.ftsBans))
	mux.Handle("POST /ban/se", s.serve(auth, s.ftsBan))
	mux.Handle("DELETE /ban/se", s.serve(auth, s.ftsUnban))
	mux.Handle("GET /config/se", s.serve(auth, s.ftsSEConfig))
	mux.Handle("POST /config/se", s.serve(auth, s.ftsSetSEConfig))
	mux.Handle("DELETE /config/se", s.serve(auth, s.ftsDeleteSEConfig))
	s.routeDelegation(mux, auth)
}

func (s *Service) ftsSubmit(w http.ResponseWriter, r *http.Request, id Identity) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := s.needDelegation(r.Context(), id); err != nil {
		return err
	}
	job, files, err := s.parseSubmission(body, id, dialect{fts: true})
	if err != nil {
		return err
	}
	if id.Method == "certificate" {
		job.Params.DelegationID, job.Params.DelegationDN = id.DelegationID, id.DN
	}
	stored, created, err := s.submit(r.Context(), job, files)
	if err != nil {
		return err
	}
	if !created {
		return &apiError{code: http.StatusConflict, msg: fmt.Sprintf("job %s exists already: its sid (or id) was submitted before", stored.ID)}
	}
	writeFTS(w, http.StatusOK, map[string]string{"job_id": stored.ID})
	return nil
}

// ids splits a comma-separated list of job ids (empty ones dropped).
func ids(list string) []string {
	var out []string
	for id := range strings.SplitSeq(list, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// status is one job's answer in a list: the job with its http_status, or
// an error's.
type status struct {
	code int
	body object
}

// errStatus is a job's error answer in a list.
func errStatus(id string, code int, msg string) status {
	return status{code: code, body: object{{"job_id", id}, {"http_status", httpStatus(code)}, {"http_message", msg}}}
}

// multistatus answers a list of job answers as FTS3 does: one id, its
// answer with its status; several, the list, 207 when any failed. A job
// that had ended is answered 200 with its http_status 304 inside (FTS3
// answers 304, whose body HTTP drops: its command line then fails to
// read the final state its documentation promises).
func multistatus(w http.ResponseWriter, n int, sts []status) {
	if n <= 1 && len(sts) == 1 {
		code := sts[0].code
		if code == http.StatusNotModified {
			code = http.StatusOK
		}
		writeFTS(w, code, sts[0].body)
		return
	}
	code := http.StatusOK
	out := make([]object, len(sts))
	for i, st := range sts {
		if st.code >= 300 && st.code != http.StatusNotModified {
			code = http.StatusMultiStatus
		}
		out[i] = st.body
	}
	writeFTS(w, code, out)
}

// jobStatus reads a job for a list answer (404 when missing).
func (s *Service) jobStatus(ctx context.Context, id string) (store.Job, *status, error) {
	j, err := s.st.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		st := errStatus(id, http.StatusNotFound, fmt.Sprintf("no job with the id %q", id))
		return j, &st, nil
	}
	return j, nil, err
}

// GET /jobs/{id}[,{id}...][?files=field,...]: the jobs, each with the
// named fields of its files when files= is given.
func (s *Service) ftsJobs(w http.ResponseWriter, r *http.Request, _ Identity) error {
	list := ids(r.PathValue("ids"))
	var fields []string
	withFiles := r.URL.Query().Has("files")
	if withFiles {
		fields = strings.Split(r.URL.Query().Get("files"), ",")
	}
	sts := make([]status, 0, len(list))
	for _, id := range list {
		j, bad, err := s.jobStatus(r.Context(), id)
		if err != nil {
			return err
		}
		if bad != nil {
			sts = append(sts, *bad)
			continue
		}
		v := jobView(j)
		if withFiles {
			fs, err := s.fileViews(r.Context(), j, fields)
			if err != nil {
				return err
			}
			v = append(v, kv{"files", fs})
		}
		sts = append(sts, status{code: http.StatusOK, body: append(v, kv{"http_status", httpStatus(http.StatusOK)})})
	}
	if len(sts) == 0 {
		return badRequest("no job id")
	}
	multistatus(w, len(list), sts)
	return nil
}

// GET /jobs/{id}/files: every file of the job, every column.
func (s *Service) ftsFiles(w http.ResponseWriter, r *http.Request, _ Identity) error {
	j, err := s.st.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	fs, err := s.fileViews(r.Context(), j, nil)
	if err != nil {
		return err
	}
	writeFTS(w, http.StatusOK, fs)
	return nil
}

// GET /jobs/{id}/dm: data management operations (none: wanda's jobs are
// transfers).
func (s *Service) ftsDM(w http.ResponseWriter, r *http.Request, _ Identity) error {
	if _, err := s.st.Job(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	writeFTS(w, http.StatusOK, []any{})
	return nil
}

// GET /jobs/{id}/{field}: one field of a job.
func (s *Service) ftsField(w http.ResponseWriter, r *http.Request, _ Identity) error {
	j, err := s.st.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	v, ok := jobView(j).get(r.PathValue("field"))
	if !ok {
		return &apiError{code: http.StatusNotFound, msg: fmt.Sprintf("a job has no field %q", r.PathValue("field"))}
	}
	writeFTS(w, http.StatusOK, v)
	return nil
}

// GET /jobs/{id}/files/{fid}/retries: the failed attempts at a file.
func (s *Service) ftsRetries(w http.ResponseWriter, r *http.Request, _ Identity) error {
	j, err := s.st.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	fid, err := strconv.Atoi(r.PathValue("fid"))
	if err != nil {
		return badRequest("file id %q: a number", r.PathValue("fid"))
	}
	fs, err := s.st.Files(r.Context(), j.ID)
	if err != nil {
		return err
	}
	es := entries(fs, nil)
	if fid < 0 || fid >= len(es) {
		return &apiError{code: http.StatusNotFound, msg: fmt.Sprintf("job %s has no file %d", j.ID, fid)}
	}
	as, err := s.st.Attempts(r.Context(), j.ID)
	if err != nil {
		return err
	}
	e := es[fid]
	out := []object{}
	for _, a := range as {
		if a.Index != e.f.Index || a.Source != e.f.Sources[e.alt] || a.ErrorClass == "" {
			continue
		}
		out = append(out, object{{"file_id", fid}, {"attempt", a.N}, {"datetime", ftsTimeOf(a.End)},
			{"reason", a.ErrorClass + ": " + a.Message}, {"transfer_host", hostOf(a.Owner)}, {"log_file", nil}})
	}
	writeFTS(w, http.StatusOK, out)
	return nil
}

// hostOf is the host of an owner ("host:pid:random").
func hostOf(owner string) string {
	h, _, _ := strings.Cut(owner, ":")
	return h
}

// GET /jobs?user_dn=&vo_name=&dlg_id=&state_in=&source_se=&dest_se=&limit=&time_window=&fields=:
// jobs as FTS3 lists them: without state_in, those not ended; with it
// and no limit, those not ended (or, with time_window H[:M], those that
// ended within it); with a limit (at most 500), the newest.
func (s *Service) ftsList(w http.ResponseWriter, r *http.Request, id Identity) error {
	v := r.URL.Query()
	q := store.JobQuery{UserDN: v.Get("user_dn"), VO: v.Get("vo_name"), SourceSE: v.Get("source_se"), DestSE: v.Get("dest_se"), Limit: 10000, NoCounts: true}
	if dlg := v.Get("dlg_id"); dlg != "" {
		if dlg != id.DelegationID && !id.Admin {
			return &apiError{code: http.StatusForbidden, msg: "dlg_id is not your delegation id"}
		}
		q.CredID = dlg
	}
	limit := 0
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || n > maxList {
			return badRequest("limit %q: 0 to %d", l, maxList)
		}
		limit = n
	}
	var window time.Duration
	if tw := v.Get("time_window"); tw != "" {
		h, m, _ := strings.Cut(tw, ":")
		hours, err1 := strconv.Atoi(h)
		mins := 0
		var err2 error
		if m != "" {
			mins, err2 = strconv.Atoi(m)
		}
		if err1 != nil || err2 != nil || hours < 0 || mins < 0 {
			return badRequest("time_window %q: HOURS[:MINUTES]", tw)
		}
		window = time.Duration(hours)*time.Hour + time.Duration(mins)*time.Minute
	}
	if st := v.Get("state_in"); st != "" {
		states, err := parseStates(st)
		if err != nil {
			return err
		}
		q.States = states
		switch {
		case limit > 0:
		case window > 0:
			q.FinishedAfter = s.now().Add(-window)
		default:
			q.Unfinished = true
		}
	} else {
		q.Unfinished = true
	}
	if limit > 0 {
		q.Limit = limit
	}
	jobs, err := s.st.ListJobs(r.Context(), q)
	if err != nil {
		return err
	}
	var fields []string
	if f := v.Get("fields"); f != "" {
		fields = strings.Split(f, ",")
	}
	out := make([]object, 0, len(jobs))
	for _, j := range jobs {
		jv := jobView(j)
		if fields != nil {
			sub := object{}
			for _, f := range fields {
				if x, ok := jv.get(f); ok {
					sub = append(sub, kv{f, x})
				}
			}
			jv = sub
		}
		out = append(out, jv)
	}
	writeFTS(w, http.StatusOK, out)
	return nil
}

// DELETE /jobs/{id}[,{id}...]: cancel jobs; each answered with the job,
// CANCELED (304 when it had ended).
func (s *Service) ftsCancel(w http.ResponseWriter, r *http.Request, id Identity) error {
	return s.changeJobs(w, r, id, func(j store.Job) (store.Job, bool, error) {
		j, err := s.cancel(r.Context(), j.ID)
		if errors.Is(err, store.ErrFinal) {
			return j, false, nil
		}
		return j, true, err
	})
}

// POST /jobs/{id}[,{id}...] {"params": {"priority": N}}: change the jobs'
// priority; each answered with the job (304 when it had ended).
func (s *Service) ftsModify(w http.ResponseWriter, r *http.Request, id Identity) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var m struct {
		Params map[string]json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return badRequest("want {\"params\": {\"priority\": N}}: %v", err)
	}
	prio, set, err := parseInt(m.Params["priority"])
	if err != nil || set && (prio < 1 || prio > 5) {
		return badRequest("params.priority %s: 1 to 5", m.Params["priority"])
	}
	return s.changeJobs(w, r, id, func(j store.Job) (store.Job, bool, error) {
		if j.State.Final() {
			return j, false, nil
		}
		if !set {
			return j, true, nil
		}
		j, err := s.st.SetPriority(r.Context(), j.ID, prio)
		if errors.Is(err, store.ErrFinal) {
			return j, false, nil
		}
		if err == nil {
			s.log.Info("job priority changed", "job", j.ID, "priority", prio)
		}
		return j, true, err
	})
}

// changeJobs answers a change to each job of the request's list as FTS3
// does (multistatus): change makes it to a job that exists and that id
// may change, and reports whether it changed anything (not: the job had
// ended, 304).
func (s *Service) changeJobs(w http.ResponseWriter, r *http.Request, id Identity, change func(store.Job) (store.Job, bool, error)) error {
	list := ids(r.PathValue("ids"))
	sts := make([]status, 0, len(list))
	for _, jid := range list {
		j, bad, err := s.jobStatus(r.Context(), jid)
		if err != nil {
			return err
		}
		if bad == nil {
			if err := mayChange(id, j); err != nil {
				st := errStatus(jid, http.StatusForbidden, err.Error())
				bad = &st
			}
		}
		if bad != nil {
			sts = append(sts, *bad)
			continue
		}
		j, changed, err := change(j)
		if err != nil {
			return err
		}
		code, msg := http.StatusOK, any(nil)
		if !changed {
			code, msg = http.StatusNotModified, "The job is in a terminal state"
		}
		sts = append(sts, status{code: code, body: append(jobView(j), kv{"http_status", httpStatus(code)}, kv{"http_message", msg})})
	}
	if len(sts) == 0 {
		return badRequest("no job id")
	}
	multistatus(w, len(list), sts)
	return nil
}

// DELETE /jobs/{id}/files/{fid}[,{fid}...]: cancel files of a job of
// files with one source each; each file's state after, or why not.
func (s *Service) ftsCancelFiles(w http.ResponseWriter, r *http.Request, id Identity) error {
	j, err := s.st.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := mayChange(id, j); err != nil {
		return err
	}
	if j.Type != store.TypeRegular {
		return badRequest("the files of a multihop job, or of one with alternative sources, are canceled all at once (job type %s)", j.Type)
	}
	var idx []int
	fids := ids(r.PathValue("fids"))
	for _, f := range fids {
		n, err := strconv.Atoi(f)
		if err != nil {
			return badRequest("file id %q: a number", f)
		}
		idx = append(idx, n)
	}
	if len(idx) == 0 {
		return badRequest("no file id")
	}
	states, _, err := s.st.CancelFiles(r.Context(), j.ID, idx, "file canceled by its submitter")
	if err != nil {
		return err
	}
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = string(st)
		if st == "" {
			out[i] = "File does not belong to the job"
		}
	}
	s.log.Info("files canceled", "job", j.ID, "files", fids)
	if len(out) == 1 {
		writeFTS(w, http.StatusOK, out[0])
		return nil
	}
	writeFTS(w, http.StatusOK, out)
	return nil
}

package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// Handler serves the service's APIs: FTS3's REST API at FTS3's paths
// (fts3.go), and wanda's own under /api/v1/ (apiv1.go), both over the
// same jobs. auth tells who asks (nil: everyone is anonymous).
func (s *Service) Handler(auth Authenticator) http.Handler {
	if auth == nil {
		auth = func(*http.Request) (Identity, error) { return Anonymous(), nil }
	}
	mux := http.NewServeMux()
	s.routeFTS(mux, auth)
	s.routeV1(mux, auth)
	return mux
}

// handler is an API handler of an authenticated request; an error is
// answered by fail.
type handler func(w http.ResponseWriter, r *http.Request, id Identity) error

// serve authenticates a request and runs h.
func (s *Service) serve(auth Authenticator, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := auth(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="wanda-transfer"`)
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		}
		if err := h(w, r, id); err != nil {
			s.fail(w, err)
		}
	}
}

// fail answers an error: an *apiError with its status, a missing job 404,
// anything else 500 (logged; the client learns no more).
func (s *Service) fail(w http.ResponseWriter, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae.code, ae.msg)
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such job")
	default:
		s.log.Error("transfer API", "err", err)
		writeError(w, http.StatusInternalServerError, "the store failed")
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers an error as FTS3 does ({"status": "404 Not Found",
// "message": ...}), with wanda's "error" beside.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"status": httpStatus(code), "message": msg, "error": msg})
}

// httpStatus is a status as FTS3 writes it in its answers ("200 Ok").
func httpStatus(code int) string {
	switch code {
	case http.StatusOK:
		return "200 Ok"
	case statusAuthenticationTimeout:
		return "419 Authentication Timeout"
	}
	return fmt.Sprintf("%d %s", code, http.StatusText(code))
}

// readBody reads a JSON request body, at most maxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.Contains(ct, "json") && !strings.HasPrefix(ct, "text/plain") {
		return nil, &apiError{code: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("the body is JSON (Content-Type: application/json), not %q", ct)}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, &apiError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the body is larger than %d bytes: submit several jobs", maxBody)}
	case err != nil:
		return nil, badRequest("reading the body: %v", err)
	}
	return b, nil
}

// mayChange refuses id changes to job j unless it submitted it (or is an
// administrator, or the job is anonymous).
func mayChange(id Identity, j store.Job) error {
	if id.Admin || j.Submitter == "anonymous" || j.Submitter == id.Key {
		return nil
	}
	return &apiError{code: http.StatusForbidden, msg: fmt.Sprintf("job %s was submitted by another identity: only its submitter may change it", j.ID)}
}

// submit stores a parsed job: refused (403) when a storage it names is
// banned, its files waiting when the ban lets them (WAIT_AS).
func (s *Service) submit(ctx context.Context, j store.Job, files []store.File) (store.Job, bool, error) {
	bans, err := s.st.Bans(ctx)
	if err != nil {
		return store.Job{}, false, err
	}
	if len(bans) > 0 {
		status := map[string]string{}
		for _, b := range bans {
			status[b.SE] = b.Status
		}
		for i := range files {
			f := &files[i]
			ses := []string{f.DestSE}
			for _, src := range f.Sources {
				ses = append(ses, store.SEOf(src))
			}
			for _, se := range ses {
				switch status[se] {
				case "":
				case store.BanWaitAS:
					if f.State == store.FileSubmitted && (se == f.SourceSE || se == f.DestSE) {
						f.State = store.FileOnHold
					}
				default:
					return store.Job{}, false, &apiError{code: http.StatusForbidden, msg: fmt.Sprintf("%s is banned: no new transfers from or to it", se)}
				}
			}
		}
	}
	stored, created, err := s.st.Submit(ctx, j, files)
	if err != nil {
		return store.Job{}, false, err
	}
	if created {
		if s.o.Metrics != nil {
			s.o.Metrics.Jobs.Inc()
		}
		s.log.Info("job submitted", "job", stored.ID, "type", stored.Type, "files", len(files), "submitter", stored.Submitter, "vo", stored.VO)
		s.Kick()
	}
	return stored, created, nil
}

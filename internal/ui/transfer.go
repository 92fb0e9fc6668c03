package ui

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"time"

	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// TransferService is what the transfer dashboard reads.
type TransferService interface {
	Jobs(ctx context.Context, n int) ([]store.Job, error)
	Links(ctx context.Context, n int) ([]transfer.LinkInfo, error)
}

// TransferState is what the transfer service's page shows (GET
// /ui/api/state): the latest jobs with their files by state, and each
// link's optimizer state with its latest decisions. No URL and no
// credential of a job is in it.
type TransferState struct {
	Time  time.Time           `json:"time"`
	Jobs  []TransferJob       `json:"jobs"`
	Links []transfer.LinkInfo `json:"links"`
}

// TransferJob is a job as the page shows it.
type TransferJob struct {
	ID        string                  `json:"job_id"`
	Submitter string                  `json:"submitter"`
	State     store.JobState          `json:"state"`
	Priority  int                     `json:"priority"`
	Created   time.Time               `json:"created"`
	Updated   time.Time               `json:"updated"`
	Files     map[store.FileState]int `json:"files"`
}

// maxJobs is how many jobs the page lists.
const maxJobs = 100

// TransferHandler serves the transfer service's dashboard at /ui/: the
// queue and the links, from svc, as the page asks (every two seconds).
func TransferHandler(svc TransferService) http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix("/ui/", http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readOnly(w, r) {
			return
		}
		switch p := r.URL.Path; p {
		case "/ui":
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
		case "/ui/", "/ui/index.html":
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/ui/transfers.html"
			files.ServeHTTP(w, r2)
		case "/ui/api/state":
			st, err := transferState(r.Context(), svc)
			if err != nil {
				http.Error(w, `{"error": "the store failed"}`, http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
		case "/ui/transfers.html", "/ui/transfers.js", "/ui/common.js", "/ui/style.css", "/ui/favicon.svg":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

func transferState(ctx context.Context, svc TransferService) (TransferState, error) {
	st := TransferState{Time: time.Now().UTC(), Jobs: []TransferJob{}, Links: []transfer.LinkInfo{}}
	jobs, err := svc.Jobs(ctx, maxJobs)
	if err != nil {
		return st, err
	}
	for _, j := range jobs {
		st.Jobs = append(st.Jobs, TransferJob{ID: j.ID, Submitter: j.Submitter, State: j.State, Priority: j.Params.Priority,
			Created: j.Created, Updated: j.Updated, Files: j.Files})
	}
	links, err := svc.Links(ctx, 5)
	if err != nil {
		return st, err
	}
	if links != nil {
		st.Links = links
	}
	return st, nil
}

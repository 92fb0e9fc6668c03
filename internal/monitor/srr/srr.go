// Package srr serves WLCG's storage resource reporting (SRR): the JSON
// document through which WLCG accounts a site's storage — the service,
// its protocol endpoints, and its shares with their total and used
// space. A Service rebuilds the document on an interval from the
// filesystems' own accounting (statfs: the numbers df shows) and from
// the size of quota areas, and serves the bytes it built: a request costs
// no system call.
//
// Written here because the document is small and no Go library makes
// it; the field names and their meaning are the WLCG SRR proposal's.
package srr

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// WellKnown is the path every WLCG storage serves the document at.
const WellKnown = "/.well-known/srr"

// Endpoint is a protocol endpoint: its name, URL and interface type
// ("https", "davs", "root", as WLCG names them).
type Endpoint struct {
	Name, URL, Type string
}

// Share is a storage share: an export (its directory's filesystem gives
// the numbers) or a quota area (Quota is its size, the bytes its
// directory holds are its use).
type Share struct {
	Name  string
	Paths []string // logical
	Dir   string   // local
	Quota int64
	VOs   []string
	// Used, when set, tells a quota area's use (a cache's own
	// accounting) instead of a walk of Dir.
	Used func() (used, files int64, err error)
}

// Options configure a Service.
type Options struct {
	// Name and ID name the storage service; Version is wanda's.
	Name, ID, Version string
	// QualityLevel is development, testing, pre-production or
	// production.
	QualityLevel string
	Shares       []Share
	// Interval is the time between refreshes (default 5 minutes).
	Interval time.Duration
	Log      *slog.Logger
}

// Service builds and serves the document.
type Service struct {
	o         Options
	endpoints atomic.Pointer[[]Endpoint]
	doc       atomic.Pointer[[]byte]
	now       func() time.Time
}

// New makes a Service; Refresh or Run builds its first document.
func New(o Options) *Service {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Minute
	}
	if o.QualityLevel == "" {
		o.QualityLevel = "production"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{o: o, now: time.Now}
}

// SetEndpoints names the endpoints (known once the role listens).
func (s *Service) SetEndpoints(e []Endpoint) { s.endpoints.Store(&e) }

// Run refreshes the document now and every interval until ctx ends.
func (s *Service) Run(ctx context.Context) {
	s.refreshLogged()
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.refreshLogged()
		case <-ctx.Done():
			return
		}
	}
}

func (s *Service) refreshLogged() {
	if err := s.Refresh(); err != nil {
		s.o.Log.Warn("srr: refreshing the storage report (its shares keep their last numbers)", "err", err)
	}
}

// The document, as the WLCG SRR proposal names its fields.
type document struct {
	StorageService service `json:"storageservice"`
}

type service struct {
	Name                  string     `json:"name"`
	ID                    string     `json:"id"`
	ServiceType           string     `json:"servicetype"`
	Implementation        string     `json:"implementation"`
	ImplementationVersion string     `json:"implementationversion"`
	QualityLevel          string     `json:"qualitylevel"`
	LatestUpdate          int64      `json:"latestupdate"`
	StorageCapacity       capacity   `json:"storagecapacity"`
	StorageEndpoints      []endpoint `json:"storageendpoints"`
	StorageShares         []share    `json:"storageshares"`
}

type capacity struct {
	Online space `json:"online"`
}

type space struct {
	TotalSize int64 `json:"totalsize"`
	UsedSize  int64 `json:"usedsize"`
}

type endpoint struct {
	Name           string   `json:"name"`
	EndpointURL    string   `json:"endpointurl"`
	InterfaceType  string   `json:"interfacetype"`
	AssignedShares []string `json:"assignedshares"`
}

type share struct {
	Name              string   `json:"name"`
	TotalSize         int64    `json:"totalsize"`
	UsedSize          int64    `json:"usedsize"`
	NumberOfFiles     *int64   `json:"numberoffiles,omitempty"`
	Timestamp         int64    `json:"timestamp"`
	VOs               []string `json:"vos"`
	Path              []string `json:"path"`
	AssignedEndpoints []string `json:"assignedendpoints"`
}

// Refresh rebuilds the document. A share whose numbers cannot be had
// keeps its last ones (none before the first success: it is left out),
// and the error says which.
func (s *Service) Refresh() error {
	now := s.now().Unix()
	prev := map[string]share{}
	if b := s.doc.Load(); b != nil {
		var d document
		if json.Unmarshal(*b, &d) == nil {
			for _, sh := range d.StorageService.StorageShares {
				prev[sh.Name] = sh
			}
		}
	}
	svc := service{
		Name: s.o.Name, ID: s.o.ID, ServiceType: "disk", Implementation: "wanda", ImplementationVersion: s.o.Version,
		QualityLevel: s.o.QualityLevel, LatestUpdate: now,
		StorageEndpoints: []endpoint{}, StorageShares: []share{},
	}
	if e := s.endpoints.Load(); e != nil {
		for _, ep := range *e {
			svc.StorageEndpoints = append(svc.StorageEndpoints, endpoint{Name: ep.Name, EndpointURL: ep.URL,
				InterfaceType: ep.Type, AssignedShares: []string{"all"}})
		}
	}
	var errs []error
	seenFS := map[uint64]bool{}
	for _, sh := range s.o.Shares {
		out := share{Name: sh.Name, Timestamp: now, VOs: nonNil(sh.VOs), Path: nonNil(sh.Paths), AssignedEndpoints: []string{"all"}}
		if sh.Quota > 0 {
			measure := sh.Used
			if measure == nil {
				measure = func() (int64, int64, error) { return usage(sh.Dir) }
			}
			used, files, err := measure()
			if err != nil {
				errs = append(errs, err)
				if p, ok := prev[sh.Name]; ok {
					svc.StorageShares = append(svc.StorageShares, p)
				}
				continue
			}
			out.TotalSize, out.UsedSize, out.NumberOfFiles = sh.Quota, used, &files
			svc.StorageShares = append(svc.StorageShares, out)
			continue
		}
		total, used, dev, err := statfs(sh.Dir)
		if err != nil {
			errs = append(errs, err)
			if p, ok := prev[sh.Name]; ok {
				svc.StorageShares = append(svc.StorageShares, p)
			}
			continue
		}
		out.TotalSize, out.UsedSize = total, used
		svc.StorageShares = append(svc.StorageShares, out)
		// The service's capacity counts each filesystem once.
		if !seenFS[dev] {
			seenFS[dev] = true
			svc.StorageCapacity.Online.TotalSize += total
			svc.StorageCapacity.Online.UsedSize += used
		}
	}
	b, err := json.MarshalIndent(document{svc}, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	s.doc.Store(&b)
	return errors.Join(errs...)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// statfs is a directory's filesystem as df shows it: its size and what
// is used (size minus free blocks), in bytes, and its device.
func statfs(dir string) (total, used int64, dev uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, 0, &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	bs := int64(st.Frsize)
	if bs == 0 {
		bs = int64(st.Bsize)
	}
	var sd syscall.Stat_t
	if err := syscall.Stat(dir, &sd); err != nil {
		return 0, 0, 0, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	return int64(st.Blocks) * bs, int64(st.Blocks-st.Bfree) * bs, uint64(sd.Dev), nil
}

// usage is the space a directory's files take on disk (their blocks, as
// du counts them) and how many they are.
func usage(dir string) (used, files int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != dir {
				return nil // removed meanwhile
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used += st.Blocks * 512
		}
		if d.Type().IsRegular() {
			files++
		}
		return nil
	})
	return used, files, err
}

// ServeHTTP answers GET and HEAD with the last document built.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	b := s.doc.Load()
	if b == nil {
		http.Error(w, "the storage report is being built", http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "max-age="+strconv.Itoa(int(s.o.Interval/time.Second)))
	h.Set("Content-Length", strconv.Itoa(len(*b)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(*b)
}

// Hostname is the host's name, the default name of the service.
func Hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}

package fedsim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Options describe one member.
type Options struct {
	NS Namespace
	// Index is the member's number in NS.
	Index int
	// Parent is the redirector it joins (http://host:port).
	Parent string
	// Labels (site, region) go in its heartbeats.
	Labels map[string]string
	// Digest makes it send its digest (fed.DigestPath).
	Digest bool
	// Client sends its heartbeats; shared by many members.
	Client *http.Client
	Log    *slog.Logger
}

// Member is one running member.
type Member struct {
	o        Options
	url      string
	instance string
	ln       net.Listener
	srv      *http.Server
	joiner   *fed.Joiner
	done     chan struct{}

	mu      sync.Mutex
	stopped bool
	locates int64
}

// Start listens on loopback and joins the parent.
func Start(o Options) (*Member, error) {
	if o.Index < 0 || o.Index >= o.NS.Members {
		return nil, fmt.Errorf("fedsim: member %d of %d", o.Index, o.NS.Members)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	m := &Member{o: o, url: "http://" + ln.Addr().String(), instance: hex.EncodeToString(b), ln: ln, done: make(chan struct{})}
	m.srv = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(ln); close(m.done) }()
	jo := fed.JoinOptions{Parents: []string{o.Parent}, Self: m.self, Client: o.Client, Log: o.Log}
	if o.Digest {
		d := o.NS.Digest(o.Index)
		jo.Digest = func() (fed.Digest, uint64, bool) { return d, 1, true }
	}
	m.joiner = fed.StartJoiner(jo)
	return m, nil
}

// URL is where the member serves.
func (m *Member) URL() string { return m.url }

// Index is its number in the namespace.
func (m *Member) Index() int { return m.o.Index }

// Locates counts the locate queries it answered.
func (m *Member) Locates() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.locates
}

func (m *Member) self() fed.Member {
	return fed.Member{
		ID: m.url, Instance: m.instance, Role: fed.RoleServer, URL: m.url,
		Exports: []fed.Export{{Prefix: m.o.NS.Prefix, ReadOnly: true}}, Labels: m.o.Labels,
		Software: "wanda fedsim", Load: fed.Load{FreeBytes: 1 << 40, TotalBytes: 2 << 40},
	}
}

// ServeHTTP answers the locate API, HEAD and GET of its files, and a
// small /metrics.
func (m *Member) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/api/v1/locate":
		m.mu.Lock()
		m.locates++
		m.mu.Unlock()
		m.locate(w, r)
	case r.URL.Path == "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "wanda_http_requests_total{role=\"server\",method=\"GET\",code=\"200\"} 0\nwanda_http_response_bytes_total{role=\"server\"} 0\n")
	case r.URL.Path == "/healthz":
		_, _ = io.WriteString(w, "ok\n")
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		p, err := fed.CleanLogical(r.URL.Path)
		if err != nil || !m.o.NS.Holds(m.o.Index, p) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(m.o.NS.Size, 10))
		w.Header().Set("Last-Modified", Mtime.UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = io.CopyN(w, zeros{}, m.o.NS.Size)
		}
	default:
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "read only", http.StatusMethodNotAllowed)
	}
}

// Mtime is every simulated file's modification time.
var Mtime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// locate answers as fed.Local does for a data server.
func (m *Member) locate(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get(fed.ParamPath)
	p, err := fed.CleanLogical(raw)
	if raw == "" || err != nil {
		fed.WriteError(w, http.StatusBadRequest, "bad or missing path")
		return
	}
	out := fed.Located{Version: fed.Version, Path: p, Status: fed.NotFound}
	if m.o.NS.Holds(m.o.Index, p) {
		self := m.self()
		out.Status = fed.Found
		out.Replicas = []fed.Replica{{URL: fed.FileURL(m.url, p), Member: m.url, Role: fed.RoleServer,
			Size: m.o.NS.Size, ModTime: Mtime, Labels: self.Labels, Load: self.Load}}
	}
	fed.WriteJSON(w, http.StatusOK, out)
}

// Close leaves the parent (a goodbye) and stops serving.
func (m *Member) Close() {
	if !m.stop() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.joiner.Stop(ctx)
	_ = m.srv.Shutdown(ctx)
	<-m.done
}

// Kill stops at once, as a process killed would: no goodbye, its port
// and connections (the watch one too) closed.
func (m *Member) Kill() {
	if !m.stop() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the goodbye cannot go out
	_ = m.srv.Close()
	m.joiner.Stop(ctx)
	<-m.done
}

func (m *Member) stop() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return false
	}
	m.stopped = true
	return true
}

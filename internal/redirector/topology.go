package redirector

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/wanda-fed/wanda/internal/fed"
)

// Topology returns the tree below this redirector: its members and, for
// child redirectors, their trees (asked in parallel, depth levels deep).
func (r *Redirector) Topology(ctx context.Context, depth int) fed.Node {
	exports, load := r.reg.summary()
	root := fed.Node{Version: fed.Version, ID: r.opts.ID, Role: fed.RoleRedirector, URL: fed.BaseURL(r.opts.URL),
		Healthy: true, Exports: exports, Labels: r.opts.Labels, Load: load}
	now := r.now()
	members := r.Members()
	root.Children = make([]fed.Node, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		n := fed.Node{ID: m.ID, Role: m.Role, URL: m.URL, Healthy: m.Healthy, Drained: m.Drained, Static: m.Static,
			AgeMS: now.Sub(m.LastSeen).Milliseconds(), Exports: m.Exports, Labels: m.Labels, Load: m.Load, Error: m.LastError}
		root.Children[i] = n
		if m.Role != fed.RoleRedirector || depth <= 1 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := r.fetchTopology(ctx, m.URL, depth-1)
			if err != nil {
				root.Children[i].Healthy = false
				root.Children[i].Error = err.Error()
				return
			}
			root.Children[i].Children = sub.Children
		}()
	}
	wg.Wait()
	return root
}

func (r *Redirector) fetchTopology(ctx context.Context, base string, depth int) (fed.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.LookupTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fed.BaseURL(base)+"/api/v1/topology?depth="+strconv.Itoa(depth), nil)
	if err != nil {
		return fed.Node{}, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fed.Node{}, fed.ShortErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fed.Node{}, fmt.Errorf("topology answered %s", resp.Status)
	}
	var n fed.Node
	if err := fed.Decode(resp.Body, &n); err != nil {
		return fed.Node{}, err
	}
	return n, nil
}

func (r *Redirector) serveTopology(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeErr(w, http.StatusMethodNotAllowed, "%s not allowed on /api/v1/topology", req.Method)
		return
	}
	depth := 8
	if d := req.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > 16 {
			writeErr(w, http.StatusBadRequest, "topology: depth %q: want 1 to 16", d)
			return
		}
		depth = n
	}
	ctx, cancel := context.WithTimeout(req.Context(), 2*r.opts.LookupTimeout+time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, r.Topology(ctx, depth))
}

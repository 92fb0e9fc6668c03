package fedtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/fed"
)

// This file asks the nodes: membership, locate, admin, metrics, and the
// polling every wait uses.

// Metric sums the current life's samples of the metric name whose labels
// include the given name, value pairs (counter and gauge values; the
// sample count of histograms).
func (n *Node) Metric(name string, labels ...string) float64 {
	n.mu.Lock()
	r := n.cur
	n.mu.Unlock()
	if r == nil {
		return 0
	}
	mfs, err := r.reg.Gather()
	if err != nil {
		n.f.t.Fatalf("fedtest: metrics of %s: %v", n.Name, err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m.GetLabel(), labels[i], labels[i+1]) {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabel[L interface {
	GetName() string
	GetValue() string
}](ls []L, k, v string) bool {
	return slices.ContainsFunc(ls, func(l L) bool { return l.GetName() == k && l.GetValue() == v })
}

// Members asks node's GET /api/v1/members.
func (f *Fed) Members(t testing.TB, node *Node) []fed.MemberStatus {
	t.Helper()
	ms, err := members(node)
	if err != nil {
		t.Fatalf("fedtest: members of %s: %v", node.Name, err)
	}
	return ms
}

func members(node *Node) ([]fed.MemberStatus, error) {
	resp, err := apiClient.Get(node.URL + "/api/v1/members")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	var ms []fed.MemberStatus
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		return nil, err
	}
	return ms, nil
}

// WaitMembers polls node's member list until exactly n members are
// healthy, for at most 10 s, and returns the list.
func (f *Fed) WaitMembers(t testing.TB, node *Node, n int) []fed.MemberStatus {
	t.Helper()
	var last []fed.MemberStatus
	var lastErr error
	err := poll(waitLimit, func() bool {
		last, lastErr = members(node)
		return lastErr == nil && Healthy(last) == n
	})
	if err != nil {
		t.Fatalf("fedtest: %s: want %d healthy members, have %d (%v): %s", node.Name, n, Healthy(last), lastErr, describe(last))
	}
	return last
}

// Healthy counts the healthy members in ms.
func Healthy(ms []fed.MemberStatus) int {
	k := 0
	for _, m := range ms {
		if m.Healthy {
			k++
		}
	}
	return k
}

// Find returns the member with the given ID (or URL) in ms.
func Find(ms []fed.MemberStatus, id string) (fed.MemberStatus, bool) {
	for _, m := range ms {
		if m.ID == id || fed.BaseURL(m.URL) == fed.BaseURL(id) {
			return m, true
		}
	}
	return fed.MemberStatus{}, false
}

func describe(ms []fed.MemberStatus) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "[%s healthy=%v drained=%v exports=%d] ", m.ID, m.Healthy, m.Drained, len(m.Exports))
	}
	return b.String()
}

// WaitSettled waits until every running redirector knows its running
// children, healthy, and every child redirector among them advertises
// an export (it heartbeated after its own members joined).
func (f *Fed) WaitSettled(t testing.TB) {
	t.Helper()
	for _, n := range f.nodes {
		if n.Kind != KindRedirector || !n.Alive() {
			continue
		}
		var want []*Node
		for _, c := range f.nodes {
			if c.Parent == n && c.Alive() {
				want = append(want, c)
			}
		}
		var last []fed.MemberStatus
		err := poll(waitLimit, func() bool {
			var err error
			if last, err = members(n); err != nil {
				return false
			}
			for _, c := range want {
				m, ok := Find(last, c.URL)
				if !ok || !m.Healthy || (c.Kind == KindRedirector && !covers(m.Exports, f.Prefix)) {
					return false
				}
			}
			return true
		})
		if err != nil {
			t.Fatalf("fedtest: %s did not settle: %s", n.Name, describe(last))
		}
	}
}

func covers(ex []fed.Export, p string) bool {
	return slices.ContainsFunc(ex, func(e fed.Export) bool { return fed.Covers(e.Prefix, p) })
}

// Admin posts an admin action (drain, undrain, remove, add) to a
// redirector and returns the status and body.
func (f *Fed) Admin(t testing.TB, node *Node, action string, req fed.AdminRequest) (int, []byte) {
	t.Helper()
	req.Version = fed.Version
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := apiClient.Post(node.URL+"/api/v1/admin/"+action, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("fedtest: admin %s at %s: %v", action, node.Name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// Locate asks node's GET /api/v1/locate for p (with all=1 when all).
func (f *Fed) Locate(t testing.TB, node *Node, p string, all bool) fed.Located {
	t.Helper()
	u := node.URL + "/api/v1/locate?path=" + p
	if all {
		u += "&all=1"
	}
	resp, err := apiClient.Get(u)
	if err != nil {
		t.Fatalf("fedtest: locate %s at %s: %v", p, node.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("fedtest: locate %s at %s: %s %s", p, node.Name, resp.Status, b)
	}
	var loc fed.Located
	if err := fed.Decode(resp.Body, &loc); err != nil {
		t.Fatalf("fedtest: locate %s at %s: %v", p, node.Name, err)
	}
	return loc
}

// apiClient asks the API of nodes; it follows no redirect.
var apiClient = HTTPClient()

// HTTPClient returns a client for tests that look at redirects: it
// follows none, uses no proxy and gives up after 10 s.
func HTTPClient() *http.Client {
	return &http.Client{
		Transport:     &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64},
		Timeout:       waitLimit,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Eventually polls cond every 5 ms until it holds, failing the test with
// what after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

func poll(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// MetricNames is every metric the current life of n registered, those
// with no sample yet included (a vector nobody used).
func (n *Node) MetricNames() []string {
	n.mu.Lock()
	r := n.cur
	n.mu.Unlock()
	if r == nil {
		return nil
	}
	return DescribedNames(r.reg)
}

// DescribedNames is the names of every metric reg holds.
func DescribedNames(reg *prometheus.Registry) []string {
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		// A Desc tells its name only in its String: Desc{fqName: "name", ...}.
		if _, rest, ok := strings.Cut(d.String(), `fqName: "`); ok {
			if name, _, ok := strings.Cut(rest, `"`); ok {
				names = append(names, name)
			}
		}
	}
	return names
}

package fedtest_test

import (
	"encoding/xml"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// needIPv6 skips (fails in CI) when the machine has no IPv6 loopback.
func needIPv6(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no IPv6 loopback in CI: %v", err)
		}
		t.Skipf("no IPv6 loopback (%v); with CI set this is a failure", err)
	}
	ln.Close()
}

// A federation on the IPv6 loopback, and one that mixes the families:
// members join over [::1], redirectors answer 307 with bracketed
// Location, Link and Metalink URLs that clients follow, locate names
// members by URLs that parse, and root:// clients are sent to IPv6
// members with kXR_redirect, for reads and for writes.
func TestDualStack(t *testing.T) {
	needIPv6(t)
	for _, tc := range []struct {
		name string
		host func(string) string
	}{
		{"ipv6", func(string) string { return "::1" }},
		// The global redirector and site 1's servers on IPv6, site 0's
		// servers and site 1's redirector on IPv4.
		{"mixed", func(name string) string {
			if name == "global" || name == "site0" || strings.HasPrefix(name, "site1/") {
				return "::1"
			}
			return "127.0.0.1"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fedtest.Start(t, fedtest.Options{Global: true, Host: tc.host})
			for _, n := range f.Nodes() {
				if want := tc.host(n.Name); !strings.Contains(n.URL, "//"+hostPort(want)) {
					t.Fatalf("%s listens at %s, want on %s", n.Name, n.URL, want)
				}
			}
			want := payload(1<<20+5, 23)
			f.Put(t, 1, 0, "/store/v6/f.bin", want)
			f.Put(t, 0, 1, "/store/v6/g.bin", want)

			// HTTP: Location, Link and Metalink name the holders in
			// URLs that parse back to their addresses.
			for _, file := range []struct {
				path   string
				holder *fedtest.Node
			}{{"/store/v6/f.bin", f.Server(1, 0)}, {"/store/v6/g.bin", f.Server(0, 1)}} {
				a := do(t, http.MethodGet, f.Global.URL+file.path, http.Header{"Accept": {"application/metalink4+xml"}})
				loc := redirectTo(t, a)
				if loc.Host != file.holder.Addr || loc.Path != file.path {
					t.Errorf("Location %s, want %s on %s", loc, file.path, file.holder.Addr)
				}
				for _, l := range links(a.Header) {
					if u, err := url.Parse(l); err != nil || u.Host != file.holder.Addr {
						t.Errorf("Link <%s>: %v, want host %s", l, err, file.holder.Addr)
					}
				}
				var ml struct {
					URLs []string `xml:"file>url"`
				}
				if err := xml.Unmarshal(a.Body, &ml); err != nil || len(ml.URLs) == 0 {
					t.Fatalf("metalink %q: %v", a.Body, err)
				}
				for _, m := range ml.URLs {
					if u, err := url.Parse(m); err != nil || u.Host != file.holder.Addr {
						t.Errorf("metalink url %s: %v, want host %s", m, err, file.holder.Addr)
					}
				}
				got, res := copyVia(t, f.Global.URL+file.path)
				if d := testserver.DiffBytes(got, want); d != "" {
					t.Errorf("GET %s through the global redirector: %s", file.path, d)
				}
				if res.Server != file.holder.Addr {
					t.Errorf("GET %s served by %q, want %s", file.path, res.Server, file.holder.Addr)
				}
				loc6 := f.Locate(t, f.Global, file.path, true)
				if len(loc6.Replicas) != 1 {
					t.Fatalf("locate %s: %+v", file.path, loc6)
				}
				if u, err := url.Parse(loc6.Replicas[0].URL); err != nil || u.Host != file.holder.Addr {
					t.Errorf("locate %s: replica %s: %v, want host %s", file.path, loc6.Replicas[0].URL, err, file.holder.Addr)
				}
			}

			// HTTP write through the global redirector.
			req, _ := http.NewRequest(http.MethodPut, f.Global.URL+"/store/v6/put.bin", strings.NewReader("written over v6"))
			resp, err := engineHTTP().Do(req)
			if err != nil {
				t.Fatalf("PUT through the global redirector: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("PUT through the global redirector: %s", resp.Status)
			}

			// root://: kXR_redirect to the holder, for a read and a write.
			c := client.New()
			xrdclient.Register(c)
			root := func(n *fedtest.Node) string { return "root://" + n.Addr + "/" }
			rootReadAndUpload(t, c, f, root, "/store/v6", want, 1)
		})
	}
}

// hostPort is host as it appears in a URL's host:port.
func hostPort(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// engineHTTP follows redirects, for PUT through redirectors (307 keeps
// the method and body).
func engineHTTP() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil}}
}

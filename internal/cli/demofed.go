package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/transfer"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// demoSite is one site of the demo federation: its name and the local
// layout of each of its two servers (the same logical /store, kept in
// different places, as real sites do).
type demoSite struct {
	name    string
	layouts [2]string
}

var demoSites = []demoSite{
	{"A", [2]string{"siteA/StorageRoot/cms/store", "siteA/disk2/cms/store"}},
	{"B", [2]string{"siteB/data/cms", "siteB/pool7/cms"}},
}

// runFedDemo starts a federation on loopback (a global redirector, two
// sites each with a site redirector and two servers of different local
// layouts) and shows a copy resolved through the hierarchy and a read of a
// replicated file.
func runFedDemo(ctx context.Context, out, logw io.Writer, dir string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wait []chan error
	defer func() {
		cancel()
		for _, c := range wait {
			<-c
		}
	}()
	logCfg := config.Default().Log
	listen := func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	startRedirector := func(site string, parent string) (string, error) {
		cfg := config.Default()
		cfg.Redirector.Heartbeat = 500 * time.Millisecond
		cfg.Redirector.ShutdownTimeout = 2 * time.Second
		if parent != "" {
			cfg.Redirector.Join = []string{parent}
		}
		if site != "" {
			cfg.Redirector.Labels = map[string]string{"site": site}
		}
		r, err := app.NewRedirector(cfg, app.NewLogger(logCfg, logw).With("node", "redirector "+site), prometheus.NewRegistry())
		if err != nil {
			return "", err
		}
		ln, err := listen()
		if err != nil {
			return "", err
		}
		c := make(chan error, 1)
		wait = append(wait, c)
		go func() { c <- r.Serve(ctx, ln) }()
		return "http://" + ln.Addr().String(), nil
	}
	startServer := func(site, root, redirector string) (string, error) {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return "", err
		}
		cfg := config.Default()
		cfg.Server.Exports = []config.Export{{Prefix: "/store", Path: root}}
		cfg.Server.Federation.Join = []string{redirector}
		cfg.Server.Federation.Heartbeat = 500 * time.Millisecond
		cfg.Server.Federation.Labels = map[string]string{"site": site}
		cfg.Server.ShutdownTimeout = 2 * time.Second
		cfg.Server.TPC.Allow = []string{"127.0.0.0/8"} // the demo's sites copy between themselves on loopback
		srv, err := app.NewServer(cfg, app.NewLogger(logCfg, logw).With("node", "server "+site), prometheus.NewRegistry())
		if err != nil {
			return "", err
		}
		ln, err := listen()
		if err != nil {
			srv.Close()
			return "", err
		}
		c := make(chan error, 1)
		wait = append(wait, c)
		go func() { c <- srv.Serve(ctx, ln); srv.Close() }()
		return "http://" + ln.Addr().String(), nil
	}

	fed1 := filepath.Join(dir, "federation")
	global, err := startRedirector("", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "== a federation on loopback\n   global redirector  %s\n", global)
	siteURL := map[string]string{}
	roots := map[string][2]string{}
	for _, s := range demoSites {
		r, err := startRedirector(s.name, global)
		if err != nil {
			return err
		}
		siteURL[s.name] = r
		var rs [2]string
		for i, layout := range s.layouts {
			rs[i] = filepath.Join(fed1, layout)
			u, err := startServer(s.name, rs[i], r)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "   site %s server %d   %s  /store -> %s\n", s.name, i+1, u, rs[i])
		}
		roots[s.name] = rs
		fmt.Fprintf(out, "   site %s redirector %s\n", s.name, r)
	}
	// A file only at site B (on its second server) and one at both sites.
	only := "fed/only-at-B/" + filepath.Base(demo.RootPath)
	if err := demo.WriteRootFile(filepath.Join(roots["B"][1], only), demo.RootEntries); err != nil {
		return err
	}
	shared := "fed/replicated/calib.bin"
	body := make([]byte, 4<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	for _, root := range []string{roots["A"][0], roots["B"][0]} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(shared)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, shared), body, 0o644); err != nil {
			return err
		}
	}
	if err := waitTopology(ctx, global, 2+2*2); err != nil {
		return err
	}
	// The transfer service, on SQLite in the demo's directory.
	tr, err := app.NewTransfer(ctx, app.TransferOptions{DB: "sqlite:" + filepath.Join(dir, "transfer.db"), Client: demoClient(),
		Service: transfer.Options{Tick: 100 * time.Millisecond}, Allow: []string{"127.0.0.0/8"}}, app.NewLogger(logCfg, logw).With("node", "transfer"), prometheus.NewRegistry())
	if err != nil {
		return err
	}
	defer tr.Close()
	tln, err := listen()
	if err != nil {
		return err
	}
	tc := make(chan error, 1)
	wait = append(wait, tc)
	go func() { tc <- tr.Serve(ctx, tln) }()
	xfer := "http://" + tln.Addr().String()
	fmt.Fprintf(out, "   transfer service   %s\n", xfer)
	fmt.Fprintf(out, "   dashboards         %s/ui/ (the federation)  %s/ui/ (the transfers)\n", global, xfer)
	fmt.Fprintln(out)
	a := siteURL["A"]
	return runSteps(ctx, out, [][]string{
		{"topology", global},
		// Not at site A: site A's redirector asks the global one, which
		// asks site B; the client is sent straight to B's server.
		{"locate", a + "/store/" + only},
		{"cp", a + "/store/" + only, filepath.Join(dir, "from-site-B.root")},
		// At both sites: any of them, the other as an alternate.
		{"locate", global + "/store/" + shared},
		{"get", global + "/store/" + shared, filepath.Join(dir, "calib.bin")},
		// A new file goes to a writable server of the site it is sent to.
		{"put", filepath.Join(dir, "from-site-B.root"), a + "/store/user/demo/new.root"},
		{"locate", global + "/store/user/demo/new.root"},
		// A job for the transfer service: site B's file to site A, by
		// third-party copy through both redirectors.
		{"transfer", "submit", "--server", xfer, "--id", "demo-job", global + "/store/" + only, a + "/store/user/demo/by-transfer.root"},
		{"transfer", "status", "--server", xfer, "--watch", "--interval", "200ms", "demo-job"},
		{"locate", global + "/store/user/demo/by-transfer.root"},
	})
}

// waitTopology polls the global redirector until n nodes (redirectors and
// servers, itself excluded) are in its tree, for up to 15 s.
func waitTopology(ctx context.Context, base string, n int) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		var node fed.Node
		got := 0
		if resp, err := http.Get(base + "/api/v1/topology"); err == nil {
			if json.NewDecoder(resp.Body).Decode(&node) == nil {
				got = countNodes(node) - 1
			}
			resp.Body.Close()
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo federation: %d of %d members joined after 15s", got, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func countNodes(n fed.Node) int {
	c := 1
	for _, ch := range n.Children {
		c += countNodes(ch)
	}
	return c
}

// demoClient is the transfer service's engine (no credentials).
func demoClient() *client.Client {
	c := client.New()
	xt := xrdclient.New(xrdclient.Options{})
	c.Register("root", xt)
	c.Register("roots", xt)
	return c
}

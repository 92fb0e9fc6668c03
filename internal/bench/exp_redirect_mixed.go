package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// The redirect experiment's mixed trees (issue 26, docs/federation.md
// "Joining AAA"): the same files, read over root:// through trees where
// XRootD's daemons and wanda's roles meet over the cmsd protocol.
//
//	xrootd-over-wanda  site:   an XRootD manager over 2 wanda servers (--join cmsd://)
//	                   region: an XRootD meta-manager over a wanda site redirector over them
//	wanda-over-xrootd  site:   a wanda redirector over 2 XRootD data servers (--cmsd-listen)
//	                   region: a wanda redirector over an XRootD site manager over them
//
// Every tree is started afresh for each level, client and repetition, as
// the pure trees are. Their data servers are the pure trees': wanda's for
// xrootd-over-wanda, XRootD's for wanda-over-xrootd, so their per-hop
// overhead is taken against that system's direct reads.

// Mixed systems.
const (
	sysXRootDOverWanda = "xrootd-over-wanda"
	sysWandaOverXRootD = "wanda-over-xrootd"
)

// redirectMixedLevels are the levels mixed trees have.
var redirectMixedLevels = []string{"site", "region"}

// redirectMixedBase is the system whose data servers a mixed tree reads
// from (its direct level is the mixed tree's).
var redirectMixedBase = map[string]string{sysXRootDOverWanda: "wanda", sysWandaOverXRootD: "xrootd"}

// redirectMixed runs the mixed trees of a run; nil when there are none.
type redirectMixed struct {
	spec   fedSpec
	roots  []string // each XRootD data server's oss.localroot (site A's dirs)
	levels []string
	r      *Run
	logs   []string // the XRootD cms logs of the tree being measured
}

// redirectMixedSetup checks that mixed trees can run (root:// among the
// protocols, XRootD installed, no WAN relays) and notes why not.
func redirectMixedSetup(r *Run, spec fedSpec, protos, levels []string, on bool, rtt time.Duration) *redirectMixed {
	if !on {
		return nil
	}
	m := &redirectMixed{spec: spec, r: r}
	for _, l := range levels {
		if slices.Contains(redirectMixedLevels, l) {
			m.levels = append(m.levels, l)
		}
	}
	switch {
	case !slices.Contains(protos, "root"):
		r.Note("mixed trees: measured over root:// only, and proto has no root: skipped")
		return nil
	case rtt > 0:
		r.Note("mixed trees: skipped with rtt > 0 (XRootD's daemons are not behind wan relays)")
		return nil
	case len(m.levels) == 0:
		r.Note("mixed trees: they have the levels site and region, and levels has neither: skipped")
		return nil
	case !r.Have("xrootd") || !r.Have("cmsd"):
		r.Note("mixed trees: xrootd and cmsd are not installed (apt-get install xrootd-server xrootd-server-plugins), skipped")
		return nil
	}
	for _, d := range spec.Sites[0].Dirs[:2] {
		m.roots = append(m.roots, strings.TrimSuffix(d, filepath.FromSlash(spec.Prefix)))
	}
	r.Note("mixed trees (cmsd protocol between XRootD 5.5's daemons and wanda's roles), over root://, started afresh for each level, client and repetition: %s — site: an XRootD manager over 2 wanda servers (--join cmsd://), region: an XRootD meta-manager over a wanda site redirector (--join cmsd://) over 2 wanda servers; %s — site: a wanda redirector (--cmsd-listen) over 2 XRootD data servers, region: a wanda redirector over an XRootD site manager (all.manager meta) over 2 XRootD data servers. XRootD's cms.delay as in its cluster (startup 1 s). Per-hop overheads are taken against the direct reads of the system whose data servers the tree has (wanda's, XRootD's)",
		sysXRootDOverWanda, sysWandaOverXRootD)
	return m
}

// has reports whether the mixed trees measure level.
func (m *redirectMixed) has(level string) bool { return m != nil && slices.Contains(m.levels, level) }

// level starts system's tree for level, reads through it and stops it.
func (m *redirectMixed) level(ctx context.Context, system, level string, names []string, reads int, size int64, rc redirectClient) (map[string]redirectSamples, error) {
	var stop []func()
	defer func() {
		for i := len(stop) - 1; i >= 0; i-- {
			stop[i]()
		}
	}()
	defer rc.closeIdle()
	var entry string
	var err error
	m.logs = nil
	switch system {
	case sysXRootDOverWanda:
		entry, err = m.xrootdOverWanda(ctx, level, &stop)
	case sysWandaOverXRootD:
		entry, err = m.wandaOverXRootD(ctx, level, &stop)
	default:
		err = fmt.Errorf("no mixed system %s", system)
	}
	if err != nil {
		return nil, err
	}
	if err := waitRootRedirect(ctx, rc, entry+m.spec.Prefix+"/bench/warm0.bin"); err != nil {
		var tails []string
		for _, l := range m.logs {
			tails = append(tails, l+": "+peerTail(l))
		}
		return nil, fmt.Errorf("%s %s: %w (%s)", system, level, err, strings.Join(tails, "; "))
	}
	return redirectPasses(ctx, func(int) string { return entry }, names, reads, size, rc)
}

// xrootdOverWanda: XRootD's redirector(s) above wanda's servers.
func (m *redirectMixed) xrootdOverWanda(ctx context.Context, level string, stop *[]func()) (string, error) {
	work := filepath.Join(m.r.Dir(), "mixed-"+strconv.Itoa(peerSeq()))
	top, err := xrdpeer.StartManager(ctx, xrdpeer.ManagerOptions{Export: m.spec.Prefix, Meta: level == "region", Work: work, Log: m.r.Log()})
	if err != nil {
		return "", err
	}
	*stop = append(*stop, func() { top.Close() })
	m.logs = append(m.logs, top.CmsLog)
	parent := "cmsd://" + top.CMS
	var site *fedNode
	if level == "region" {
		if site, err = startFedRedirector(ctx, m.spec, "site-A", []string{parent}); err != nil {
			return "", err
		}
		*stop = append(*stop, func() { _ = site.stop() })
		parent = site.URL
	}
	for i, d := range m.spec.Sites[0].Dirs[:2] {
		srv, err := startFedServer(ctx, m.spec, fmt.Sprintf("server-A%d", i+1), d, parent)
		if err != nil {
			return "", err
		}
		*stop = append(*stop, func() { _ = srv.stop() })
		if site == nil {
			if err := waitManagerLogin(ctx, top, srv.URL); err != nil {
				return "", err
			}
		}
	}
	if site != nil {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := fedWaitMembers(wctx, site.URL, m.spec.Prefix, 2); err != nil {
			return "", err
		}
		if err := waitManagerLogin(ctx, top, site.URL); err != nil {
			return "", err
		}
	}
	return "root://" + top.Redirector + "/", nil
}

// wandaOverXRootD: a wanda redirector above XRootD's servers (or above
// an XRootD site manager above them).
func (m *redirectMixed) wandaOverXRootD(ctx context.Context, level string, stop *[]func()) (string, error) {
	port, err := xrdpeer.FreePort()
	if err != nil {
		return "", err
	}
	cmsdAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	spec := m.spec
	spec.Redirector = func(rc *config.Redirector) { rc.CmsdListen = cmsdAddr }
	rd, err := startFedRedirector(ctx, spec, "wanda", nil)
	if err != nil {
		return "", err
	}
	*stop = append(*stop, func() { _ = rd.stop() })
	manager := cmsdAddr
	var site *xrdpeer.Manager
	if level == "region" {
		work := filepath.Join(m.r.Dir(), "mixed-"+strconv.Itoa(peerSeq()))
		if site, err = xrdpeer.StartManager(ctx, xrdpeer.ManagerOptions{Export: m.spec.Prefix, Parent: cmsdAddr, Work: work, Log: m.r.Log()}); err != nil {
			return "", err
		}
		*stop = append(*stop, func() { site.Close() })
		m.logs = append(m.logs, site.CmsLog)
		manager = site.CMS
	}
	for _, root := range m.roots {
		work := filepath.Join(m.r.Dir(), "mixed-"+strconv.Itoa(peerSeq()))
		n, err := xrdpeer.StartNode(ctx, xrdpeer.NodeOptions{Manager: manager, Dir: root, Export: m.spec.Prefix, Work: work, Log: m.r.Log()})
		if err != nil {
			return "", err
		}
		*stop = append(*stop, func() { n.Close() })
		if site != nil {
			if err := waitManagerLogin(ctx, site, "root://"+n.Addr); err != nil {
				return "", err
			}
		}
	}
	want := 2
	if site != nil {
		want = 1
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := fedWaitMembers(wctx, rd.URL, m.spec.Prefix, want); err != nil {
		return "", fmt.Errorf("%s: %w", sysWandaOverXRootD, err)
	}
	return "root://" + strings.TrimPrefix(rd.URL, "http://") + "/", nil
}

// waitManagerLogin waits until an XRootD manager logged in the member
// whose data port is u's.
func waitManagerLogin(ctx context.Context, m *xrdpeer.Manager, u string) error {
	pu, err := url.Parse(u)
	if err != nil {
		return err
	}
	port, _ := strconv.Atoi(pu.Port())
	deadline := time.Now().Add(30 * time.Second)
	for !m.LoggedIn(port) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no login from data port %d at %s after 30 s: %s", port, m.CMS, peerTail(m.CmsLog))
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitRootRedirect polls a root:// entry point until it redirects u: an
// XRootD redirector answers kXR_wait in its first moments.
func waitRootRedirect(ctx context.Context, rc redirectClient, u string) error {
	pu, err := url.Parse(u)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := rc.root.Stat(tctx, pu, nil, false)
		cancel()
		var re *client.RedirectError
		if errors.As(err, &re) {
			return nil
		}
		if cerr := context.Cause(ctx); cerr != nil {
			return cerr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not redirected after 30 s: %v", u, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// summary adds seed 003's table with a column per tree: mean open
// latency (ms, median over the repetitions) per entry point and pass.
func (m *redirectMixed) summary(r *Run) {
	if m == nil {
		return
	}
	mean := map[string][]float64{}
	var clients []string
	for _, row := range r.Rows() {
		if row.Get("proto") != "root" {
			continue
		}
		c := fmt.Sprint(row.Get("client"))
		if !slices.Contains(clients, c) {
			clients = append(clients, c)
		}
		if v, ok := toFloat(row.Get("open_mean_ms")); ok {
			k := fmt.Sprintf("%v %v %v %v", row.Get("system"), row.Get("level"), row.Get("pass"), c)
			mean[k] = append(mean[k], v)
		}
	}
	med := func(xs []float64) string {
		if len(xs) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f", percentile(xs, 0.5))
	}
	systems := []string{"wanda", "xrootd", sysXRootDOverWanda, sysWandaOverXRootD}
	var b strings.Builder
	b.WriteString("Seed 003's Table 1 with a column per tree, root://: mean open latency in ms (median over the repetitions). wanda: wanda's redirectors and servers; xrootd: XRootD's cmsd redirector and servers (site level only); " +
		sysXRootDOverWanda + ": XRootD redirectors over wanda servers (region: a meta-manager over a wanda site redirector); " +
		sysWandaOverXRootD + ": a wanda redirector over XRootD servers (region: over an XRootD site manager). Direct reads of the mixed trees are their data servers' system's.\n\n")
	for _, c := range clients {
		fmt.Fprintf(&b, "client %s:\n\n| entry point | pass | %s |\n|---|---|%s\n", c, strings.Join(systems, " | "), strings.Repeat("---:|", len(systems)))
		for _, level := range []string{"direct", "site", "region", "global"} {
			for _, pass := range []string{"cold", "cached"} {
				cells := make([]string, len(systems))
				any := false
				for i, s := range systems {
					src := s
					if base, ok := redirectMixedBase[s]; ok && level == "direct" {
						src = base
					}
					cells[i] = med(mean[fmt.Sprintf("%s %s %s %s", src, level, pass, c)])
					any = any || cells[i] != "—"
				}
				if any {
					fmt.Fprintf(&b, "| %s | %s | %s |\n", level, pass, strings.Join(cells, " | "))
				}
			}
		}
		b.WriteString("\n")
	}
	r.Summary(b.String())
}

package interop

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wanda-fed/wanda/internal/fed"
	"github.com/wanda-fed/wanda/internal/ui"
)

// The dashboard of a tree of 1,111 nodes (a global redirector, 10
// regions, 100 sites of 10 servers): each site's servers under one row,
// the whole tree accounted for, a site opened with a click.
func TestDashboardLargeTree(t *testing.T) {
	chrome := requireTool(t, "chromium")
	tree := fed.Node{ID: "global", Role: fed.RoleRedirector, URL: "http://127.0.0.1:9", Healthy: true}
	for r := range 10 {
		region := fed.Node{ID: fmt.Sprintf("region%d", r), Role: fed.RoleRedirector, Healthy: true,
			URL: fmt.Sprintf("http://127.0.0.%d:9", 10+r), Labels: map[string]string{"region": fmt.Sprint(r)}}
		for s := range 10 {
			site := fmt.Sprintf("s%02d%d", r, s)
			sn := fed.Node{ID: site, Role: fed.RoleRedirector, Healthy: true, URL: fmt.Sprintf("http://127.0.%d.%d:9", r+1, s+1),
				Labels: map[string]string{"site": site}}
			for m := range 10 {
				sn.Children = append(sn.Children, fed.Node{ID: fmt.Sprintf("%s-%d", site, m), Role: fed.RoleServer, Healthy: m != 3,
					URL: fmt.Sprintf("http://127.%d.%d.%d:9", r+1, s+1, m+1), Labels: map[string]string{"site": site}})
			}
			region.Children = append(region.Children, sn)
		}
		tree.Children = append(tree.Children, region)
	}
	d := ui.New(ui.Options{Topology: func(context.Context, int) fed.Node { return tree }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	actx, cancelA := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))...)
	defer cancelA()
	cctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	c, stop := context.WithTimeout(cctx, time.Minute)
	defer stop()
	start := time.Now()
	if _, err := chromedp.Run(c, chromedp.Navigate(srv.URL+"/ui/")); err != nil {
		t.Fatal(err)
	}
	eval := func(js string) int {
		n, err := chromedp.Run(c, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return n
	}
	for eval(`uiMembers()`) != 1111 {
		if c.Err() != nil {
			t.Fatalf("the page accounts for %d of 1111 nodes", eval(`uiMembers()`))
		}
		time.Sleep(20 * time.Millisecond) // polling the page
	}
	t.Logf("the whole tree shown after %v", time.Since(start).Round(time.Millisecond))
	if g := eval(`document.querySelectorAll("#members tr.group").length`); g != 100 {
		t.Errorf("%d site groups, want 100", g)
	}
	if r := eval(`document.querySelectorAll("#members tbody tr[data-url]").length`); r != 111 {
		t.Errorf("%d redirector rows laid out, want 111 (servers are grouped)", r)
	}
	if f := eval(`[...document.querySelectorAll("#members tr.group .failed, #members tr.group td.status.failed")].length`); f != 100 {
		t.Errorf("%d groups show a failed member, want 100 (the fourth of each site)", f)
	}
	// A click on the site's row (dispatched to it: the table is below the
	// fold of the headless window).
	if n := eval(`document.querySelector('#members tr.group[data-site="s000"] td').click(), 1`); n != 1 {
		t.Fatal("clicking the site's row")
	}
	for eval(`document.querySelectorAll("#members tbody tr[data-url]").length`) != 121 {
		if c.Err() != nil {
			t.Fatal("opening a site did not lay its 10 servers out")
		}
		time.Sleep(20 * time.Millisecond) // polling the page
	}
}

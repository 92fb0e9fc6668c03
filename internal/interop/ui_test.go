package interop

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wanda-fed/wanda/internal/app"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/transfer"
)

// The dashboard in a real browser: headless Chromium loads a global
// redirector's /ui/ over a federation of two sites, without a console
// error; the page shows every member's URL; a server killed turns
// failed (with a reason, in the latest failures) once its redirector
// drops it, and comes back ok after a restart; on a transfer service's
// /ui/, a job submitted appears and finishes, and its link is shown. Screenshots are kept in
// $WANDA_ARTIFACTS (default $TMPDIR/wanda-artifacts)/ui.
func TestDashboardInChromium(t *testing.T) {
	chrome := requireTool(t, "chromium")
	f := fedtest.Start(t, fedtest.Options{Sites: 2, ServersPerSite: 2, Global: true,
		Heartbeat: 200 * time.Millisecond, MissLimit: 3})
	art := os.Getenv("WANDA_ARTIFACTS")
	if art == "" {
		art = filepath.Join(os.TempDir(), "wanda-artifacts")
	}
	art = filepath.Join(art, "ui")
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}

	actx, cancelA := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()))...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// run runs one action, bounded (the browser itself lives as long as ctx).
	run := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		if _, err := chromedp.Run(c, a); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", chrome, err)
	}

	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	shot := func(name string) {
		c, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		b, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		if err != nil {
			t.Errorf("screenshot %s: %v", name, err)
			return
		}
		p := filepath.Join(art, name+".png")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot: %s", p)
	}
	text := func(sel string) string {
		c, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		s, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	// rows is the members table: URL -> status.
	rows := func() map[string]string {
		c, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		got, err := chromedp.Run(c, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#members tbody tr")].map(r => [r.dataset.url, r.dataset.status]))`))
		if err != nil {
			t.Fatalf("reading the members table: %v", err)
		}
		return got
	}
	waitFor := func(what string, d time.Duration, ok func(map[string]string) bool) map[string]string {
		deadline := time.Now().Add(d)
		for {
			got := rows()
			if ok(got) {
				return got
			}
			if time.Now().After(deadline) {
				shot("timeout")
				t.Fatalf("%s: not within %v; the page shows %v", what, d, got)
			}
			time.Sleep(200 * time.Millisecond) // polling the page, which polls the redirector
		}
	}

	run("loading "+f.Global.URL+"/ui/", chromedp.Steps(chromedp.Navigate(f.Global.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`#members tbody tr`))))
	var want []string
	for _, s := range f.Sites {
		want = append(want, s.Redirector.URL)
		for _, srv := range s.Servers {
			want = append(want, srv.URL)
		}
	}
	waitFor("every member ok", 15*time.Second, func(got map[string]string) bool {
		for _, u := range want {
			if got[u] != "ok" {
				return false
			}
		}
		return true
	})
	body := text("body")
	for _, u := range want {
		if !strings.Contains(body, u) {
			t.Errorf("the page does not show %s", u)
		}
	}
	if !strings.Contains(body, "site0") || !strings.Contains(body, "site1") {
		t.Errorf("the page does not show the sites")
	}
	shot("federation")

	victim := f.Sites[1].Servers[0]
	killed := time.Now()
	victim.Kill()
	waitFor("the killed server failed", 10*time.Second, func(got map[string]string) bool { return got[victim.URL] == "failed" })
	t.Logf("the killed server showed failed after %v (heartbeat 200 ms, miss limit 3)", time.Since(killed).Round(10*time.Millisecond))
	if fs := text("#failures"); !strings.Contains(fs, victim.URL) {
		t.Errorf("latest failures do not name %s: %q", victim.URL, fs)
	}
	shot("server-failed")

	victim.Restart()
	waitFor("the restarted server ok", 15*time.Second, func(got map[string]string) bool { return got[victim.URL] == "ok" })
	shot("server-back")

	// The transfer service's page, in the same browser: a job appears
	// and finishes, its link shows the optimizer's state.
	svcURL := startTransferService(t)
	data := []byte(strings.Repeat("wanda dashboard test\n", 50000))
	src := f.Sites[0].Servers[0]
	if err := os.WriteFile(src.LocalPath("/store/ui-job.dat"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := f.Sites[1].Servers[1]
	job := fmt.Sprintf(`{"files": [{"sources": [%q], "destinations": [%q]}], "params": {"id": "ui-job"}}`,
		src.URL+"/store/ui-job.dat", dst.URL+"/store/ui-job.dat")
	run("loading "+svcURL+"/ui/", chromedp.Steps(chromedp.Navigate(svcURL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`#jobs`))))
	resp, err := http.Post(svcURL+"/api/v1/jobs", "application/json", strings.NewReader(job))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %s", resp.Status)
	}
	jobState := func() string {
		c, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		s, err := chromedp.Run(c, chromedp.Evaluate[string](`(document.querySelector('#jobs tr[data-job="ui-job"]') || {dataset: {}}).dataset.state || ""`))
		if err != nil {
			t.Fatalf("reading the jobs table: %v", err)
		}
		return s
	}
	deadline := time.Now().Add(30 * time.Second)
	for st := jobState(); st != "FINISHED"; st = jobState() {
		if time.Now().After(deadline) {
			shot("transfer-timeout")
			t.Fatalf("the job is %q on the page after 30 s", st)
		}
		time.Sleep(200 * time.Millisecond) // polling the page, which polls the service
	}
	if links := text("#links"); !strings.Contains(links, strings.TrimPrefix(src.URL, "http://")+" -> "+strings.TrimPrefix(dst.URL, "http://")) {
		t.Errorf("the links table does not show the job's link: %q", links)
	}
	shot("transfer-finished")
	if got, err := os.ReadFile(dst.LocalPath("/store/ui-job.dat")); err != nil || string(got) != string(data) {
		t.Errorf("the copy: %d bytes, %v", len(got), err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(slices.Compact(problems), "\n"))
	}
}

// startTransferService runs a transfer service (SQLite, open to
// loopback) in this process until the test ends and returns its URL.
func startTransferService(t *testing.T) string {
	t.Helper()
	tr, err := app.NewTransfer(context.Background(), app.TransferOptions{DB: "sqlite:" + filepath.Join(t.TempDir(), "t.db"),
		Client: client.New(), Allow: []string{"127.0.0.0/8"},
		Service: transfer.Options{Tick: 100 * time.Millisecond}}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("transfer service: %v", err)
		}
		tr.Close()
	})
	return "http://" + ln.Addr().String()
}

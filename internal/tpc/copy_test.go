package tpc_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// loopbackTPC opens loopback to third-party copies and sends markers
// often.
func loopbackTPC(c *config.Config) {
	c.Server.TPC.Allow = []string{"127.0.0.0/8"}
	c.Server.TPC.MarkerInterval = 20 * time.Millisecond
}

func both(fs ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

// site starts a server exporting /store from a fresh directory.
func site(t *testing.T, configure func(*config.Config)) (*testserver.Server, string) {
	t.Helper()
	dir := t.TempDir()
	return siteAt(t, configure, dir), dir
}

func siteAt(t *testing.T, configure func(*config.Config), dir string) *testserver.Server {
	t.Helper()
	return testserver.StartWith(t, testserver.Options{Configure: configure}, config.Export{Prefix: "/store", Path: dir})
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

type copyAnswer struct {
	status  int
	body    string
	final   string // the last line
	markers int
}

// copyReq sends a COPY to u with the headers (name, value pairs).
func copyReq(t *testing.T, u string, hdr ...string) copyAnswer {
	t.Helper()
	req, err := http.NewRequest("COPY", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := copyAnswer{status: resp.StatusCode, body: string(b), markers: strings.Count(string(b), "Perf Marker\n")}
	lines := strings.Split(strings.TrimSpace(a.body), "\n")
	a.final = lines[len(lines)-1]
	if resp.StatusCode == http.StatusAccepted && resp.Header.Get("Content-Type") != "text/perf-marker-stream" {
		t.Errorf("COPY answered 202 with Content-Type %q", resp.Header.Get("Content-Type"))
	}
	return a
}

func wantFinal(t *testing.T, a copyAnswer, prefix string) {
	t.Helper()
	if a.status != http.StatusAccepted || !strings.HasPrefix(a.final, prefix) {
		t.Errorf("COPY: %d, final line %q, want 202 and %q\n%s", a.status, a.final, prefix, a.body)
	}
	if n := strings.Count(a.body, "success:") + strings.Count(a.body, "failure:"); a.status == http.StatusAccepted && n != 1 {
		t.Errorf("%d result lines, want exactly one\n%s", n, a.body)
	}
}

// onlyFiles fails unless dir holds exactly names (no temp files).
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		slices.Sort(names)
		if slices.Equal(got, names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q, want %q", dir, got, names)
		}
		time.Sleep(10 * time.Millisecond) // polling the directory until the copy's cleanup
	}
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d of the source: %s", path, len(got), len(want), testserver.DiffBytes(got, want))
	}
}

// Pull and push between two wanda servers, with 1 to 8 streams: the
// bytes arrive whole, the stream ends with markers and one success
// line, and nothing but the file is left at the destination.
func TestPullPush(t *testing.T) {
	src, srcDir := site(t, loopbackTPC)
	dst, dstDir := site(t, loopbackTPC)
	data := randomBytes(9<<20+12345, 1)
	if err := os.WriteFile(filepath.Join(srcDir, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, streams := range []string{"", "1", "4", "8"} {
		name := "pull" + streams + ".bin"
		a := copyReq(t, dst.URL+"/store/"+name, "Source", src.URL+"/store/f.bin", "X-Number-Of-Streams", streams, "Credential", map[string]string{"": "none", "1": "gridsite"}[streams])
		wantFinal(t, a, "success: Created")
		if a.markers < 1 || !strings.Contains(a.body, "Stripe Bytes Transferred: "+strconv.Itoa(len(data))) || !strings.Contains(a.body, "RemoteConnections: tcp:127.0.0.1:") ||
			!strings.Contains(a.body, "Wanda-Checksum-Verified: adler32:") {
			t.Errorf("pull, %q streams: markers do not end with the whole file and the remote\n%s", streams, a.body)
		}
		sameFile(t, filepath.Join(dstDir, name), data)
		names = append(names, name)

		name = "push" + streams + ".bin"
		a = copyReq(t, src.URL+"/store/f.bin", "Destination", dst.URL+"/store/sub/"+name, "X-Number-Of-Streams", streams)
		wantFinal(t, a, "success: Created")
		sameFile(t, filepath.Join(dstDir, "sub", name), data)
	}
	onlyFiles(t, dstDir, append(names, "sub")...)
	onlyFiles(t, srcDir, "f.bin")

	// An empty file.
	if err := os.WriteFile(filepath.Join(srcDir, "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantFinal(t, copyReq(t, dst.URL+"/store/empty", "Source", src.URL+"/store/empty"), "success: Created")
	sameFile(t, filepath.Join(dstDir, "empty"), nil)
	wantFinal(t, copyReq(t, dst.URL+"/store/x", "Source", src.URL+"/store/missing"), "failure: remote 404")

	for srv, lines := range map[*testserver.Server][]string{
		dst: {`wanda_tpc_copies_total{mode="pull",result="ok",role="server"} 5`, `wanda_tpc_copies_total{mode="pull",result="remote 404",role="server"} 1`,
			`wanda_tpc_bytes_total{mode="pull",role="server"} ` + strconv.FormatFloat(float64(4*len(data)), 'g', -1, 64), `wanda_tpc_active{role="server"} 0`},
		src: {`wanda_tpc_copies_total{mode="push",result="ok",role="server"} 4`},
	} {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range lines {
			if !strings.Contains(string(b), l+"\n") {
				t.Errorf("metrics lack %s:\n%s", l, grepLines(string(b), "wanda_tpc"))
			}
		}
	}
}

// Requests refused before the copy starts: their status, no 202, no file.
func TestRefusedBeforeStart(t *testing.T) {
	src, srcDir := site(t, loopbackTPC)
	closed, _ := site(t, nil) // the default filter
	dst, dstDir := site(t, loopbackTPC)
	if err := os.WriteFile(filepath.Join(srcDir, "f.bin"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dstDir, "old"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		u      string
		hdr    []string
		status int
		says   string
	}{
		{"loopback refused by default", closed.URL + "/store/x", []string{"Source", src.URL + "/store/f.bin"}, 403, "--tpc-allow"},
		{"localhost refused by default", closed.URL + "/store/x", []string{"Source", "http://localhost:1/store/f.bin"}, 403, "--tpc-allow"},
		{"push to loopback refused by default", closed.URL + "/store/x", []string{"Destination", src.URL + "/store/y"}, 403, "--tpc-allow"},
		{"both headers", dst.URL + "/store/x", []string{"Source", src.URL + "/store/f.bin", "Destination", src.URL + "/store/y"}, 400, "both"},
		{"neither header", dst.URL + "/store/x", nil, 400, "Source"},
		{"relative source", dst.URL + "/store/x", []string{"Source", "/store/f.bin"}, 400, "absolute"},
		{"ftp source", dst.URL + "/store/x", []string{"Source", "ftp://127.0.0.1/f"}, 400, "not an http"},
		{"bad stream count", dst.URL + "/store/x", []string{"Source", src.URL + "/store/f.bin", "X-Number-Of-Streams", "101"}, 400, "0 to 100"},
		{"unknown credential type", dst.URL + "/store/x", []string{"Source", src.URL + "/store/f.bin", "Credential", "voms"}, 400, "not supported"},
		{"Overwrite: F onto a file", dst.URL + "/store/old", []string{"Source", src.URL + "/store/f.bin", "Overwrite", "F"}, 412, "exists"},
		{"onto a directory", dst.URL + "/store/", []string{"Source", src.URL + "/store/f.bin"}, 409, "directory"},
		{"push of a missing file", dst.URL + "/store/nope", []string{"Destination", src.URL + "/store/y"}, 404, ""},
		{"outside the exports", dst.URL + "/elsewhere/x", []string{"Source", src.URL + "/store/f.bin"}, 403, "no export"},
		{"traversal", dst.URL + "/store/../x", []string{"Source", src.URL + "/store/f.bin"}, 403, "escapes"},
	} {
		a := copyReq(t, tc.u, tc.hdr...)
		if a.status != tc.status || !strings.Contains(a.body, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, a.status, a.body, tc.status, tc.says)
		}
	}
	onlyFiles(t, dstDir, "old")
	sameFile(t, filepath.Join(dstDir, "old"), []byte("old"))
}

// Tokens: the COPY's own credential is checked against the local file
// (pull writes it, push reads it), and the remote's token travels in
// TransferHeaderAuthorization; a remote that refuses it ends the copy
// with "failure: remote 401/403" and no file.
func TestTokens(t *testing.T) {
	is := authtest.NewIssuer(t)
	src, srcDir := site(t, both(loopbackTPC, authtest.Protect(is, "/store", false)))
	dst, dstDir := site(t, both(loopbackTPC, authtest.Protect(is, "/store", false)))
	data := randomBytes(3<<20, 2)
	if err := os.WriteFile(filepath.Join(srcDir, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	read := "Bearer " + is.Token(t, "storage.read:/", nil)
	write := "Bearer " + is.Token(t, "storage.modify:/", nil)
	create := "Bearer " + is.Token(t, "storage.create:/", nil)
	other := "Bearer " + is.Token(t, "storage.read:/elsewhere", nil)
	pull := func(name string, hdr ...string) copyAnswer {
		return copyReq(t, dst.URL+"/store/"+name, append([]string{"Source", src.URL + "/store/f.bin", "Credential", "none"}, hdr...)...)
	}
	if a := pull("anon.bin"); a.status != http.StatusUnauthorized {
		t.Errorf("pull without a token: %d, want 401", a.status)
	}
	if a := pull("ro.bin", "Authorization", read); a.status != http.StatusForbidden {
		t.Errorf("pull with a read token for the destination: %d, want 403", a.status)
	}
	wantFinal(t, pull("nodeleg.bin", "Authorization", write), "failure: remote 401")
	wantFinal(t, pull("wrongscope.bin", "Authorization", write, "TransferHeaderAuthorization", other), "failure: remote 403")
	wantFinal(t, pull("ok.bin", "Authorization", write, "TransferHeaderAuthorization", read, "X-Number-Of-Streams", "4"), "success: Created")
	sameFile(t, filepath.Join(dstDir, "ok.bin"), data)
	// A create-only token pulls a new file, and may not replace it.
	wantFinal(t, pull("new.bin", "Authorization", create, "TransferHeaderAuthorization", read), "success: Created")
	if a := pull("new.bin", "Authorization", create, "TransferHeaderAuthorization", read); a.status != http.StatusForbidden || !strings.Contains(a.body, "may create new files here but not replace") {
		t.Errorf("a create-only token replacing a file: %d %q", a.status, a.final)
	}

	push := func(name string, hdr ...string) copyAnswer {
		return copyReq(t, src.URL+"/store/f.bin", append([]string{"Destination", dst.URL + "/store/" + name}, hdr...)...)
	}
	if a := push("p.bin"); a.status != http.StatusUnauthorized {
		t.Errorf("push without a token: %d, want 401", a.status)
	}
	if a := push("p.bin", "Authorization", other); a.status != http.StatusForbidden {
		t.Errorf("push with a token that may not read the source: %d, want 403", a.status)
	}
	wantFinal(t, push("p.bin", "Authorization", read, "TransferHeaderAuthorization", read), "failure: remote 403")
	wantFinal(t, push("p.bin", "Authorization", read, "TransferHeaderAuthorization", write), "success: Created")
	sameFile(t, filepath.Join(dstDir, "p.bin"), data)
	onlyFiles(t, dstDir, "ok.bin", "new.bin", "p.bin")

	// Tokens never reach the logs.
	for _, tok := range []string{read, write, create, other} {
		raw := strings.TrimPrefix(tok, "Bearer ")
		if strings.Contains(src.Log(), raw) || strings.Contains(dst.Log(), raw) {
			t.Errorf("a token is in a server's log")
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// wanda cp --tpc between root:// URLs: XRootD's rendezvous, the
// destination pulling with the copier; push is refused (root:// has
// none), auto pulls, never streams through this host.
func TestRootTPCFromClient(t *testing.T) {
	src, srcDir := site(t, loopbackTPC)
	dst, dstDir := site(t, loopbackTPC)
	data := randomBytes(6<<20+5, 7)
	if err := os.WriteFile(filepath.Join(srcDir, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := client.New()
	xt := xrdclient.New(xrdclient.Options{})
	c.Register("root", xt)
	srcURL := "root://" + src.Addr + "//store/f.bin"
	for _, mode := range []string{client.TPCPull, client.TPCAuto, client.TPCNever} {
		name := "root-" + mode + ".bin"
		res, err := c.Copy(t.Context(), []string{srcURL}, "root://"+dst.Addr+"//store/"+name, client.CopyOptions{TPC: mode, Checksum: "adler32"})
		if err != nil {
			t.Fatalf("--tpc %s: %v", mode, err)
		}
		want := map[string]string{client.TPCPull: "pull", client.TPCAuto: "pull", client.TPCNever: "stream"}[mode]
		if res[0].Mode != want || !res[0].Verified {
			t.Errorf("--tpc %s: mode %q verified %v, want %s and verified", mode, res[0].Mode, res[0].Verified, want)
		}
		sameFile(t, filepath.Join(dstDir, name), data)
	}
	if _, err := c.Copy(t.Context(), []string{srcURL}, "root://"+dst.Addr+"//store/push.bin", client.CopyOptions{TPC: client.TPCPush}); !errors.Is(err, client.ErrTPCUnsupported) {
		t.Errorf("--tpc push over root://: %v, want ErrTPCUnsupported", err)
	}
	// --no-replace: the destination exists.
	if _, err := c.Copy(t.Context(), []string{srcURL}, "root://"+dst.Addr+"//store/root-pull.bin", client.CopyOptions{TPC: client.TPCPull, NoReplace: true}); !errors.Is(err, client.ErrExist) {
		t.Errorf("--tpc pull --no-replace onto a file: %v, want ErrExist", err)
	}
	onlyFiles(t, dstDir, "root-pull.bin", "root-auto.bin", "root-never.bin")
}

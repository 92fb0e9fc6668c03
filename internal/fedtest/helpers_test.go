package fedtest_test

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/fedtest"
)

// answer is a response with its body read.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
	Took   time.Duration
}

var hc = fedtest.HTTPClient()

// do sends one request (no redirect followed) and reads the answer.
func do(t testing.TB, method, u string, hdr http.Header) answer {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, u, err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: b, Took: time.Since(start)}
}

func get(t testing.TB, u string) answer { t.Helper(); return do(t, http.MethodGet, u, nil) }

// redirectTo checks a is a 307 and returns its Location.
func redirectTo(t testing.TB, a answer) *url.URL {
	t.Helper()
	if a.Status != http.StatusTemporaryRedirect {
		t.Fatalf("status %d, want 307; body %q", a.Status, a.Body)
	}
	u, err := url.Parse(a.Header.Get("Location"))
	if err != nil || u.Host == "" {
		t.Fatalf("Location %q: %v", a.Header.Get("Location"), err)
	}
	return u
}

// hostOf is the host:port of a node URL.
func hostOf(t testing.TB, s string) string {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// links returns the URLs of the rel=duplicate Link headers, in order.
func links(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Link") {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			if !strings.Contains(part, "rel=duplicate") {
				continue
			}
			if i, j := strings.IndexByte(part, '<'), strings.IndexByte(part, '>'); i >= 0 && j > i {
				out = append(out, part[i+1:j])
			}
		}
	}
	return out
}

// engine is the real client engine with a policy for tests: quick
// backoff, a few attempts.
func engine() *client.Client {
	c := client.New()
	c.Policy = client.Policy{Attempts: 4, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		MaxRetryAfter: 2 * time.Second, Stall: 5 * time.Second}
	return c
}

// copyVia copies rawURL with the engine to a temporary file and returns
// the bytes and the result.
func copyVia(t testing.TB, rawURL string) ([]byte, client.Result) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "out")
	res, err := engine().Copy(t.Context(), []string{rawURL}, dst, client.CopyOptions{Checksum: "auto"})
	if err != nil {
		t.Fatalf("copy %s: %v", rawURL, err)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	return b, res[0]
}

// payload is n deterministic bytes that differ per seed.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

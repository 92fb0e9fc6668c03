package client_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
)

// Tokens given for an operation (a transfer job's per-file tokens) go to
// their URLs' hosts in place of the client's own token, and to no other
// host; a 401 with them is not retried with a renewed own token.
func TestWithTokens(t *testing.T) {
	data := bytes.Repeat([]byte("job"), 50000)
	a := &tokenServer{ok: map[string]bool{"tok-a": true}, data: data}
	b := &tokenServer{ok: map[string]bool{"": true, "tok-b-other": true}, data: data}
	ha, hb := httptest.NewServer(a), httptest.NewServer(b)
	defer ha.Close()
	defer hb.Close()
	c := authClient(fixed(t, "own"), ha.URL, hb.URL)
	ctx := client.WithTokens(context.Background(), map[string]string{ha.URL + "/f": "tok-a", hb.URL + "/other": "tok-b-other"})
	if _, err := c.Stat(ctx, ha.URL+"/f"); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "f")
	if _, err := c.Copy(ctx, []string{ha.URL + "/f"}, dst, client.CopyOptions{Streams: 2, ChunkMin: 64 << 10, ChunkMax: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if got := a.tokens(); !allAre(got, "tok-a") {
		t.Fatalf("the job's URL got %q, want its token only", got)
	}
	// The same host, another path: the host's token (here, b's other path's).
	if _, err := c.Stat(ctx, hb.URL+"/f"); err != nil {
		t.Fatal(err)
	}
	if got := b.tokens(); !allAre(got, "tok-b-other") {
		t.Fatalf("a path of a host with a token got %q", got)
	}
	// A host without a token gets none, not the client's own.
	other := &tokenServer{ok: map[string]bool{"": true}, data: data}
	ho := httptest.NewServer(other)
	defer ho.Close()
	c.HTTP.TrustURL(ho.URL)
	if _, err := c.Stat(ctx, ho.URL+"/f"); err != nil {
		t.Fatal(err)
	}
	if got := other.tokens(); !allAre(got, "") {
		t.Fatalf("a host with no token given got %q", got)
	}
	// A token refused: one request, no retry with the client's own.
	a.accept("tok-a", false)
	n := len(a.tokens())
	if _, err := c.Stat(ctx, ha.URL+"/f"); err == nil {
		t.Fatal("a refused token: no error")
	}
	if got := a.tokens()[n:]; !allAre(got, "tok-a") {
		t.Fatalf("after a refusal: %q", got)
	}
}

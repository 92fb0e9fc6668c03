package transfer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/transfer/store"
	"github.com/wanda-fed/wanda/internal/transfer/store/sqlite"
)

// A refresh of the bans that read the store before a ban was written
// (the scheduler's) keeps its view before the refresh of the call that
// wrote the ban does, never after: a storage just banned never looks
// free. The second refresh runs while the first holds its old view; it
// is given 200 ms to overtake it, which it could without the order.
func TestRefreshBansInOrder(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "transfer.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := New(Options{Store: st, Client: client.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan struct{})
	testHookBansRead = func() {
		testHookBansRead = nil
		go func() {
			defer close(done)
			if _, err := st.Ban(ctx, store.Ban{SE: "http://banned.example", Status: store.BanWait}); err != nil {
				t.Error(err)
			}
			s.refreshBans(ctx)
		}()
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer func() { testHookBansRead = nil }()
	s.refreshBans(ctx)
	<-done
	if !s.bannedSource("http://banned.example/store/f") {
		t.Fatal("a storage just banned looks free: an older view of the bans was kept last")
	}
}

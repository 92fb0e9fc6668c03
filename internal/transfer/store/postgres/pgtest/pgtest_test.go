package pgtest_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtest"
)

// A server starts, takes logins with the password in the DSN only, gives
// fresh databases, and leaves nothing behind: no process on its port, no
// directory.
func TestStart(t *testing.T) {
	ctx := context.Background()
	var dataDir, addr string
	t.Run("server", func(t *testing.T) {
		dsn := pgtest.Start(t)
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		addr = u.Host
		if h, _, _ := net.SplitHostPort(addr); h != "127.0.0.1" || u.Path != "/wanda" {
			t.Errorf("DSN host %s path %s", addr, u.Path)
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
			t.Fatal(err)
		}
		var listen string
		if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil || listen != "127.0.0.1" {
			t.Errorf("listen_addresses %q, %v", listen, err)
		}

		bad := *u
		bad.User = url.UserPassword("wanda", "wrong")
		if c, err := pgx.Connect(ctx, bad.String()); err == nil {
			c.Close(ctx)
			t.Errorf("login with a wrong password accepted")
		}

		other := pgtest.NewDatabase(t, dsn)
		c2, err := pgx.Connect(ctx, other)
		if err != nil {
			t.Fatalf("connect to a new database: %v", err)
		}
		defer c2.Close(ctx)
		var db string
		if err := c2.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || !strings.HasPrefix(db, "test_") {
			t.Errorf("new database %q, %v", db, err)
		}
	})
	if dataDir == "" {
		t.Fatal("no server ran")
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data directory %s left behind (%v)", dataDir, err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("something still listens on %s", addr)
	}
}

package mount_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/mount"
)

// Mount a server's /store read-only until SIGINT or SIGTERM, as `wanda
// mount` does.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	m, err := mount.New(mount.Options{
		URL:      "http://127.0.0.1:1094/store",
		Dir:      "/mnt/store",
		Client:   client.New(),
		ReadOnly: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() { m.Wait(); close(done) }()
	select {
	case <-ctx.Done():
	case <-done: // unmounted from outside
	}
	if err := m.Close(); err != nil {
		log.Fatal(err)
	}
}

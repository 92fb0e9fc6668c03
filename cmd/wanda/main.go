// Command wanda is the one binary of the wanda data federation: server,
// client verbs and demo. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/wanda-fed/wanda/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

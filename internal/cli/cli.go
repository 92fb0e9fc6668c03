// Package cli defines wanda's command line: one cobra command per role or
// verb, parsing flags into config structs and calling internal/app or
// internal/client. Exit codes are a contract: 0 success, 1 failure, 2 usage.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Version is set at build time (-ldflags "-X .../cli.Version=...").
var Version = "dev"

// usageError marks errors that exit with code 2.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Run executes the command line and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "wanda:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "wanda",
		Short:         "wanda: WAN data access for scientific data",
		Long:          "wanda serves, caches, locates and moves scientific data over the wide area network.\nOne binary: `wanda server` exports directories over HTTP/WebDAV; the client verbs read and write any HTTP/WebDAV storage.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newServerCmd(), newRedirectorCmd(), newCacheCmd(), newLocateCmd(), newTopologyCmd(), newAdminCmd(),
		newDemoCmd(),
		newWanCmd(),
		newBenchCmd(),
		newCpCmd(), newMountCmd(), newGetCmd(), newPutCmd(), newLsCmd(), newStatCmd(), newRmCmd(), newMkdirCmd(), newCatCmd(), newSumCmd(),
		newTransferCmd(),
		newTokenCmd(), newVersionCmd(),
	)
	return root
}

// nArgs is cobra.ExactArgs/RangeArgs with usage errors.
func nArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			if lo == hi {
				return usagef("%s takes %d argument(s), got %d (usage: %s)", cmd.Name(), lo, len(args), cmd.UseLine())
			}
			return usagef("%s takes %d to %d arguments, got %d (usage: %s)", cmd.Name(), lo, hi, len(args), cmd.UseLine())
		}
		return nil
	}
}

// Tree returns wanda's command tree as the binary runs it, for the
// generators that document it from outside (man pages, shell completions:
// internal/dist). Its output goes nowhere.
func Tree() *cobra.Command { return newRoot(io.Discard, io.Discard) }

package redirector

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
)

// Only an address that took no connection drops a member: a refused or
// unroutable dial; a dial the lookup's deadline or cancel cut short, on
// a busy machine, does not.
func TestUnreachable(t *testing.T) {
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		{dial(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), true},
		{dial(context.Canceled), false},
		{dial(context.DeadlineExceeded), false},
		{dial(os.NewSyscallError("socket", syscall.EMFILE)), false},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
	} {
		if got := unreachable(c.err); got != c.want {
			t.Errorf("unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

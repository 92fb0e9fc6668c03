package wan

import (
	"syscall"
	"time"
)

// preciseSleep is how much of a wait nanosleep takes over from the runtime
// timer: a little more than the runtime timer's worst lateness.
const preciseSleep = 1500 * time.Microsecond

// nanosleep blocks the calling thread (not just the goroutine) for d; the
// kernel wakes it within its timer slack (50 µs by default). An interrupted
// sleep returns early, which the caller's loop absorbs.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}

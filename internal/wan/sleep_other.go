//go:build !linux

package wan

import "time"

// preciseSleep is 0 where no better sleep than the runtime's is wired up.
const preciseSleep = 0

func nanosleep(d time.Duration) { time.Sleep(d) }

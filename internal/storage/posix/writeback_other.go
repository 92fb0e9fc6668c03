//go:build !linux

package posix

import "os"

// startWriteback does nothing where sync_file_range(2) does not exist:
// the commit's fsync writes the pages.
func startWriteback(*os.File) {}

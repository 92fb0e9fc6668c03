//go:build !linux

package fed

// DiskSpace is not measured off Linux: it reports nothing, and selection
// by free space treats such members as equal.
func DiskSpace(dirs []string) (free, total int64) { return 0, 0 }

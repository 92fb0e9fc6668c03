package fed

import "golang.org/x/sys/unix"

// DiskSpace sums the space available to unprivileged writers and the total
// size of the filesystems holding dirs, counting each filesystem once (two
// exports on one disk are not twice the space). Directories that cannot be
// examined are skipped.
func DiskSpace(dirs []string) (free, total int64) {
	type fsKey struct {
		fsid unix.Fsid
		dev  uint64
	}
	seen := map[fsKey]bool{}
	for _, d := range dirs {
		var s unix.Statfs_t
		if err := unix.Statfs(d, &s); err != nil {
			continue
		}
		k := fsKey{fsid: s.Fsid}
		if k.fsid == (unix.Fsid{}) {
			// Some filesystems report no fsid; the device number of the
			// directory tells them apart instead.
			var st unix.Stat_t
			if err := unix.Stat(d, &st); err != nil {
				continue
			}
			k.dev = uint64(st.Dev)
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		unit := int64(s.Frsize)
		if unit <= 0 {
			unit = int64(s.Bsize)
		}
		free += int64(s.Bavail) * unit
		total += int64(s.Blocks) * unit
	}
	return free, total
}

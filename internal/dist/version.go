package dist

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// describeRe matches what `git describe --always --dirty` prints: a tag
// vX.Y.Z (an optional pre-release after a '-'), then N-gHASH when commits
// follow the tag, then -dirty; or a bare abbreviated hash when no tag is
// reachable.
var (
	tagRe  = regexp.MustCompile(`^v([0-9]+(?:\.[0-9]+)*)(?:-([0-9A-Za-z.]*[A-Za-z][0-9A-Za-z.]*))?(?:-([0-9]+)-g([0-9a-f]{4,40}))?(-dirty)?$`)
	hashRe = regexp.MustCompile(`^([0-9a-f]{4,40})(-dirty)?$`)
)

// PackageVersion maps wanda's version (`git describe --always --dirty`, as
// `wanda version` prints it) to a version that dpkg and rpm both accept and
// order as releases go:
//
//	v1.2.3                    1.2.3
//	v1.2.3-rc.1               1.2.3~rc.1             (before 1.2.3)
//	v1.2.3-4-gabc1234         1.2.3+4.gabc1234       (after 1.2.3, before 1.2.4)
//	v1.2.3-4-gabc1234-dirty   1.2.3+4.gabc1234.dirty
//	abc1234 (no tag)          0.0.0~git20261127203559.abc1234 (commit time, UTC; before any release)
//	abc1234-dirty             0.0.0~git20261127203559.abc1234.dirty
//
// commit is the commit's time (SOURCE_DATE_EPOCH): with no tag it orders
// snapshots. Anything else is refused: a package must not carry a version
// its successors cannot be ordered against.
func PackageVersion(v string, commit time.Time) (string, error) {
	if m := tagRe.FindStringSubmatch(v); m != nil {
		if m[2] == "dirty" && m[3] == "" && m[5] == "" { // vX.Y.Z-dirty: no pre-release
			m[2], m[5] = "", "-dirty"
		}
		out := m[1]
		if m[2] != "" {
			out += "~" + m[2]
		}
		var meta []string
		if m[3] != "" {
			meta = append(meta, m[3], "g"+m[4])
		}
		if m[5] != "" {
			meta = append(meta, "dirty")
		}
		if len(meta) > 0 {
			out += "+" + strings.Join(meta, ".")
		}
		return out, nil
	}
	if m := hashRe.FindStringSubmatch(v); m != nil {
		out := "0.0.0~git" + commit.UTC().Format("20060102150405") + "." + m[1]
		if m[2] != "" {
			out += ".dirty"
		}
		return out, nil
	}
	return "", fmt.Errorf("version %q: not a git describe output (vX.Y.Z[-PRE][-N-gHASH][-dirty] or HASH[-dirty]); packages are built from a git checkout", v)
}

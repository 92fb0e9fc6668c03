package dist

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/cli"
)

// Options says what Build makes and from what.
type Options struct {
	Root    string    // the repository: cmd/wanda, deploy/, docs/
	Out     string    // the directory the artifacts go to (created)
	Version string    // `git describe --always --dirty`, as `wanda version` prints it
	Commit  time.Time // the commit's time (SOURCE_DATE_EPOCH): every timestamp inside
	// Revision is the commit's hash (the image's revision label, the
	// SBOM's): not read from the binary, whose VCS stamp GOFLAGS may turn off.
	Revision string
	LDFlags  string   // the linker flags of `make build` (they set the version)
	Arches   []string // GOARCH values; nil: amd64 and arm64
	// PackagesOnly builds the .deb and .rpm files only: no image, SBOM
	// or SHA256SUMS (the upgrade test's second build).
	PackagesOnly bool
	Log          io.Writer // progress lines; nil: none
}

// Result names what Build wrote.
type Result struct {
	Files       []string // base names in Out, sorted
	ImageDigest string   // the image index's digest (sha256:...)
}

// ImageFile is the image's file name in dist/ (a contract).
func ImageFile(version string) string { return "wanda-" + version + "-oci.tar" }

// SBOMFile is the SBOM's file name in dist/.
func SBOMFile(version string) string { return "wanda-" + version + ".cdx.json" }

// Build makes the packages, the image, the SBOM and SHA256SUMS in
// o.Out. The same commit, toolchain and options give the same bytes.
func Build(ctx context.Context, o Options) (Result, error) {
	var res Result
	if o.Arches == nil {
		o.Arches = []string{"amd64", "arm64"}
	}
	for _, a := range o.Arches {
		if _, ok := pkgArch["deb"][a]; !ok {
			return res, fmt.Errorf("arch %q: want amd64 or arm64", a)
		}
	}
	pkgVersion, err := PackageVersion(o.Version, o.Commit)
	if err != nil {
		return res, err
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	mtime := o.Commit.UTC()
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return res, err
	}
	work, err := os.MkdirTemp("", "wanda-dist-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(work)

	binaries := map[string]string{}
	for _, a := range o.Arches {
		binaries[a] = filepath.Join(work, "bin", a, "wanda")
		logf("dist: go build linux/%s", a)
		if err := goBuild(ctx, o.Root, a, o.LDFlags, binaries[a]); err != nil {
			return res, err
		}
	}

	s := &staged{dir: filepath.Join(work, "stage"), scripts: map[string]nfpmScripts{}}
	if err := stageFiles(o.Root, s.dir); err != nil {
		return res, err
	}
	cli.Version = o.Version
	if s.man, err = writeManPages(cli.Tree(), o.Version, mtime, filepath.Join(s.dir, "man")); err != nil {
		return res, fmt.Errorf("man pages: %w", err)
	}
	if err := writeCompletions(cli.Tree(), filepath.Join(s.dir, "completion")); err != nil {
		return res, fmt.Errorf("completions: %w", err)
	}
	for _, f := range []string{"deb", "rpm"} {
		dir := filepath.Join(work, "scripts", f)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return res, err
		}
		if s.scripts[f], err = renderScripts(f, dir); err != nil {
			return res, err
		}
	}
	for _, a := range o.Arches {
		for _, f := range []string{"deb", "rpm"} {
			name := PackageFile(f, o.Version, a)
			logf("dist: %s (version %s)", name, pkgVersion)
			if err := writePackage(f, a, pkgVersion, binaries[a], s, mtime, filepath.Join(o.Out, name)); err != nil {
				return res, err
			}
			res.Files = append(res.Files, name)
		}
	}
	if o.PackagesOnly {
		sort.Strings(res.Files)
		return res, nil
	}

	logf("dist: %s", ImageFile(o.Version))
	digest, err := writeImage(binaries, o.Arches, o.Version, o.Revision, mtime, work, filepath.Join(o.Out, ImageFile(o.Version)))
	if err != nil {
		return res, err
	}
	res.ImageDigest = digest.String()
	res.Files = append(res.Files, ImageFile(o.Version))

	graph, err := modGraph(ctx, o.Root)
	if err != nil {
		return res, err
	}
	var infos []*debug.BuildInfo
	for _, a := range o.Arches {
		bi, err := buildinfo.ReadFile(binaries[a])
		if err != nil {
			return res, fmt.Errorf("build info of %s: %w", binaries[a], err)
		}
		infos = append(infos, bi)
	}
	logf("dist: %s", SBOMFile(o.Version))
	err = writeAtomic(filepath.Join(o.Out, SBOMFile(o.Version)), func(f *os.File) error {
		return writeSBOM(f, infos, graph, o.Version, o.Revision, mtime)
	})
	if err != nil {
		return res, err
	}
	res.Files = append(res.Files, SBOMFile(o.Version))

	sort.Strings(res.Files)
	if err := writeSums(o.Out, res.Files); err != nil {
		return res, err
	}
	res.Files = append(res.Files, "SHA256SUMS")
	sort.Strings(res.Files)
	return res, nil
}

// goBuild builds cmd/wanda for linux/goarch as `make build` does (static,
// -trimpath, the same linker flags).
func goBuild(ctx context.Context, root, goarch, ldflags, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/wanda")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build linux/%s: %w\n%s", goarch, err, b)
	}
	return nil
}

// writeSums writes SHA256SUMS in dir for names, as sha256sum prints it
// (`sha256sum -c SHA256SUMS` checks them).
func writeSums(dir string, names []string) error {
	var b strings.Builder
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return writeAtomic(filepath.Join(dir, "SHA256SUMS"), func(f *os.File) error {
		_, err := io.WriteString(f, b.String())
		return err
	})
}

// Command mkdist builds what `make packages` puts in dist/: the .deb and
// .rpm packages, the OCI image, the SBOM and SHA256SUMS (internal/dist,
// docs/install.md).
//
//	go run ./internal/dist/mkdist -version $(git describe --always --dirty) \
//	    -epoch $(git log -1 --format=%ct) -ldflags '...' -out dist
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/dist"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdist:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mkdist", flag.ContinueOnError)
	var (
		o      dist.Options
		epoch  = fs.Int64("epoch", -1, "the commit's time in seconds since 1970 (SOURCE_DATE_EPOCH): every timestamp in the artifacts")
		arches = fs.String("arch", "amd64,arm64", "architectures (GOARCH), comma-separated")
	)
	fs.StringVar(&o.Root, "root", ".", "the repository")
	fs.StringVar(&o.Out, "out", "dist", "output directory")
	fs.StringVar(&o.Version, "version", "", "wanda's version, as `git describe --always --dirty` prints it")
	fs.StringVar(&o.Revision, "revision", "", "the commit's hash (git rev-parse HEAD)")
	fs.StringVar(&o.LDFlags, "ldflags", "", "linker flags of the binary (make build's)")
	fs.BoolVar(&o.PackagesOnly, "packages-only", false, "only the .deb and .rpm files")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Version == "" || *epoch < 0 {
		return fmt.Errorf("-version and -epoch are required (make packages sets them from git)")
	}
	o.Commit = time.Unix(*epoch, 0).UTC()
	o.Arches = strings.Split(*arches, ",")
	o.Log = os.Stderr
	start := time.Now()
	res, err := dist.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, f := range res.Files {
		st, err := os.Stat(o.Out + "/" + f)
		if err != nil {
			return err
		}
		fmt.Printf("%-40s %8.1f MiB\n", f, float64(st.Size())/(1<<20))
	}
	if res.ImageDigest != "" {
		fmt.Printf("image index %s\n", res.ImageDigest)
	}
	fmt.Printf("built in %.1fs\n", time.Since(start).Seconds())
	return nil
}

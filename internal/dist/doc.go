// Package dist builds what a site installs (make packages, docs/install.md):
// .deb and .rpm packages for amd64 and arm64, a multi-arch OCI image, a
// CycloneDX SBOM and SHA256SUMS, reproducibly.
//
// The formats are libraries' work: nfpm (goreleaser) writes both package
// formats from one description (contents, conffiles, scripts), so the two
// cannot drift apart; go-containerregistry assembles the image, its
// manifests, index and OCI layout without a container daemon; cyclonedx-go
// is the SBOM's schema and encoder. What is written here is what those
// libraries leave to their user: the description itself (pkg.go), the
// maintainer scripts (scripts/, one template set for dpkg's and rpm's
// conventions), the image's root (image.go: no base image, since no
// registry is reachable and a pinned Go module carries the CA roots), the
// SBOM's content read from the binaries' build information and `go mod
// graph` (sbom.go), and a tar writer (tarball.go) that sorts entries and
// fixes times and owners, for the image's layers and layout.
//
// Reproducible: every time inside is the commit's (Options.Commit,
// SOURCE_DATE_EPOCH), gzip headers carry none, entries are sorted and
// owned by numeric ids, the rpm's build host is fixed, and the SBOM's
// serial number is derived from the version and revision.
//
// The tests behind the packaging build tag (make test-packages) install
// the .deb on the machine they run on: root only, and they refuse a
// machine with wanda installed.
package dist

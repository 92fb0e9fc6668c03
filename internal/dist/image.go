package dist

import (
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's user: not root, numeric so that a runtime can check it
// (Kubernetes runAsNonRoot), the uid distroless images use.
// refName is the annotation that names an entry of an OCI layout.
const refName = "org.opencontainers.image.ref.name"

const (
	imageUID  = 65532
	imageUser = "65532:65532"
)

// imageServerConfig is the image's /etc/wanda/server.yaml: a server of
// the volume /var/lib/wanda/store under /store. Sites mount their own
// configuration over /etc/wanda (docs/install.md).
const imageServerConfig = `# /etc/wanda/server.yaml of the wanda image: serves the volume's
# /var/lib/wanda/store under /store, anonymous reads, writes refused.
# Mount your own /etc/wanda (docs/install.md, docs/config.md).
server:
  listen: "[::]:1094"
  exports:
    - prefix: /store
      path: /var/lib/wanda/store
auth:
  anonymous_read: true
log:
  level: info
  format: json
`

// caBundle is the image's /etc/ssl/certs/ca-certificates.crt: the NSS
// trust store's roots as the Go team's golang.org/x/crypto/x509roots
// module pins them (a version in go.mod, so the same bytes every build,
// unlike a copy of the build machine's store). Roots that NSS trusts only
// with a distrust date are left out: a PEM bundle cannot carry the date.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// imageLabels are the image's labels and its manifests' annotations.
func imageLabels(version, revision string, created time.Time) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "wanda",
		"org.opencontainers.image.description":   "WAN data access: a data federation for scientific data (server, redirector, cache, transfer service)",
		"org.opencontainers.image.version":       version,
		"org.opencontainers.image.revision":      revision,
		"org.opencontainers.image.source":        homepage,
		"org.opencontainers.image.url":           homepage,
		"org.opencontainers.image.documentation": homepage + "/blob/main/docs/install.md",
		"org.opencontainers.image.licenses":      license,
		"org.opencontainers.image.created":       created.UTC().Format(time.RFC3339),
	}
}

// baseLayer is everything but the binary: CA certificates, passwd and
// group with the wanda user, /tmp, the volumes' directories and the
// default configuration.
func baseLayer() []entry {
	dir := func(name string, mode int64, uid int) entry {
		return entry{name: name, mode: mode, uid: uid, gid: uid}
	}
	file := func(name string, data string) entry { return entry{name: name, mode: 0o644, data: []byte(data)} }
	return []entry{
		dir("etc/", 0o755, 0),
		file("etc/passwd", fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nwanda:x:%d:%d:wanda:/var/lib/wanda:/usr/sbin/nologin\n", imageUID, imageUID)),
		file("etc/group", fmt.Sprintf("root:x:0:\nwanda:x:%d:\n", imageUID)),
		file("etc/nsswitch.conf", "hosts: files dns\n"),
		dir("etc/ssl/", 0o755, 0),
		dir("etc/ssl/certs/", 0o755, 0),
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: caBundle()},
		dir("etc/wanda/", 0o755, 0),
		file("etc/wanda/server.yaml", imageServerConfig),
		dir("tmp/", 0o1777, 0),
		dir("usr/", 0o755, 0),
		dir("usr/bin/", 0o755, 0),
		dir("var/", 0o755, 0),
		dir("var/lib/", 0o755, 0),
		dir("var/lib/wanda/", 0o750, imageUID),
		dir("var/lib/wanda/store/", 0o755, imageUID),
	}
}

// layer packs entries into a gzipped OCI layer.
func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	var tb bytes.Buffer
	if err := writeTar(&tb, entries, mtime); err != nil {
		return nil, err
	}
	gz, err := gzipBytes(tb.Bytes(), gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// archImage is the image of one architecture: the base layer, then the
// binary.
func archImage(goarch, binary, version, revision string, mtime time.Time) (v1.Image, error) {
	base, err := layer(baseLayer(), mtime)
	if err != nil {
		return nil, err
	}
	app, err := layer([]entry{{name: "usr/bin/wanda", mode: 0o755, src: binary}}, mtime)
	if err != nil {
		return nil, err
	}
	labels := imageLabels(version, revision, mtime)
	cfg := &v1.ConfigFile{
		Architecture: goarch,
		OS:           "linux",
		Created:      v1.Time{Time: mtime},
		Config: v1.Config{
			User:       imageUser,
			Entrypoint: []string{"/usr/bin/wanda"},
			Cmd:        []string{"server", "--config", "/etc/wanda/server.yaml"},
			Env:        []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
			WorkingDir: "/var/lib/wanda",
			Volumes:    map[string]struct{}{"/etc/wanda": {}, "/var/lib/wanda": {}},
			ExposedPorts: map[string]struct{}{
				"1094/tcp": {},
			},
			Labels:     labels,
			StopSignal: "SIGTERM",
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	if goarch == "arm64" {
		cfg.Variant = "v8"
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	at := v1.Time{Time: mtime}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: at, CreatedBy: "wanda internal/dist: CA certificates, passwd, /tmp, /etc/wanda, /var/lib/wanda"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: at, CreatedBy: "wanda internal/dist: /usr/bin/wanda " + version}})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// writeImage writes the multi-arch image as an OCI layout packed in a tar
// at path. index.json names the image index of one manifest per
// architecture as VERSION (skopeo, podman, crane take it), and each
// architecture's manifest as VERSION-GOARCH: tools that unpack one image
// (umoci) refuse a name that leads to several. It returns the index's
// digest.
func writeImage(binaries map[string]string, arches []string, version, revision string, mtime time.Time, work, path string) (v1.Hash, error) {
	var (
		adds []mutate.IndexAddendum
		imgs []v1.Image
	)
	for _, a := range arches {
		img, err := archImage(a, binaries[a], version, revision, mtime)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("image %s: %w", a, err)
		}
		p := &v1.Platform{OS: "linux", Architecture: a}
		if a == "arm64" {
			p.Variant = "v8"
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
		imgs = append(imgs, img)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	idx = mutate.Annotations(idx, imageLabels(version, revision, mtime)).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir := filepath.Join(work, "oci")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{refName: version})); err != nil {
		return v1.Hash{}, err
	}
	for i, img := range imgs {
		err := lp.AppendImage(img, layout.WithPlatform(*adds[i].Platform), layout.WithAnnotations(map[string]string{refName: version + "-" + arches[i]}))
		if err != nil {
			return v1.Hash{}, err
		}
	}
	entries, err := dirEntries(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, writeAtomic(path, func(f *os.File) error { return writeTar(f, entries, mtime) })
}

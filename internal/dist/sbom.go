package dist

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/uuid"
)

// purl is a Go module's package URL.
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version + "?type=module"
}

// modGraph runs `go mod graph` in root: "from to" lines of path@version
// (the main module without a version).
func modGraph(ctx context.Context, root string) ([][2]string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "graph")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod graph: %w", err)
	}
	var edges [][2]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			edges = append(edges, [2]string{f[0], f[1]})
		}
	}
	return edges, sc.Err()
}

// writeSBOM writes a CycloneDX 1.6 JSON SBOM of the binaries (their build
// information, as debug/buildinfo reads it): the
// modules linked into them (their build information, the exact set a
// vulnerability scanner needs, with go.sum hashes and the Go toolchain),
// and the requirement edges of the module graph between those modules.
// A module that is linked but reached only through modules that are not
// hangs off wanda itself.
func writeSBOM(w io.Writer, infos []*debug.BuildInfo, graph [][2]string, version, revision string, mtime time.Time) error {
	var (
		main   *debug.BuildInfo
		linked = map[string]*debug.Module{} // path -> module as linked
	)
	for _, bi := range infos {
		main = bi
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			linked[d.Path] = d
		}
	}
	if main == nil {
		return fmt.Errorf("sbom: no binary")
	}
	mainRef := purl(main.Main.Path, version)
	settings := map[string]string{}
	for _, s := range main.Settings {
		settings[s.Key] = s.Value
	}
	props := []cdx.Property{{Name: "go:toolchain", Value: main.GoVersion}, {Name: "vcs.revision", Value: revision}}
	for _, k := range []string{"-trimpath", "CGO_ENABLED", "-ldflags"} {
		if v, ok := settings[k]; ok {
			props = append(props, cdx.Property{Name: "go:build:" + k, Value: v})
		}
	}

	paths := make([]string, 0, len(linked))
	for p := range linked {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	comps := []cdx.Component{{
		BOMRef: "pkg:golang/std@" + main.GoVersion + "?type=module", Type: cdx.ComponentTypeLibrary,
		Name: "std", Version: main.GoVersion, PackageURL: "pkg:golang/std@" + main.GoVersion + "?type=module",
		Description: "the Go standard library and runtime",
	}}
	deps := map[string]map[string]bool{mainRef: {comps[0].BOMRef: true}}
	for _, p := range paths {
		m := linked[p]
		c := cdx.Component{BOMRef: purl(p, m.Version), Type: cdx.ComponentTypeLibrary, Name: p, Version: m.Version, PackageURL: purl(p, m.Version), Scope: cdx.ScopeRequired}
		if m.Sum != "" {
			c.Properties = &[]cdx.Property{{Name: "go:module:sum", Value: m.Sum}}
		}
		comps = append(comps, c)
	}
	// The graph's edges between linked modules at their linked versions.
	incoming := map[string]bool{}
	for _, e := range graph {
		fromPath, fromVer, _ := strings.Cut(e[0], "@")
		toPath, _, _ := strings.Cut(e[1], "@")
		to, ok := linked[toPath]
		if !ok || toPath == fromPath {
			continue
		}
		var from string
		switch fm, linkedFrom := linked[fromPath]; {
		case fromPath == main.Main.Path:
			from = mainRef
		case linkedFrom && fm.Version == fromVer:
			from = purl(fromPath, fromVer)
		default:
			continue
		}
		if deps[from] == nil {
			deps[from] = map[string]bool{}
		}
		deps[from][purl(toPath, to.Version)] = true
		incoming[toPath] = true
	}
	for _, p := range paths {
		if !incoming[p] {
			deps[mainRef][purl(p, linked[p].Version)] = true
		}
	}
	var dependencies []cdx.Dependency
	refs := make([]string, 0, len(deps))
	for r := range deps {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		on := make([]string, 0, len(deps[r]))
		for d := range deps[r] {
			on = append(on, d)
		}
		sort.Strings(on)
		dependencies = append(dependencies, cdx.Dependency{Ref: r, Dependencies: &on})
	}

	bom := cdx.NewBOM()
	// A serial number that is the same for the same release: reproducible.
	bom.SerialNumber = "urn:uuid:" + uuid.NewSHA1(uuid.NameSpaceURL, []byte(mainRef+" "+revision)).String()
	bom.Metadata = &cdx.Metadata{
		Timestamp: mtime.UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "wanda internal/dist", Version: version,
			Description: "make packages: module list from the binaries' build information, edges from go mod graph",
		}}},
		Component: &cdx.Component{
			BOMRef: mainRef, Type: cdx.ComponentTypeApplication, Name: "wanda", Version: version, PackageURL: mainRef,
			Description: "WAN data access: a data federation for scientific data",
			ExternalReferences: &[]cdx.ExternalReference{
				{Type: cdx.ERTypeVCS, URL: homepage},
			},
			Properties: &props,
		},
	}
	bom.Components = &comps
	bom.Dependencies = &dependencies
	return cdx.NewBOMEncoder(w, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, cdx.SpecVersion1_6)
}

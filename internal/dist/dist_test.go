package dist

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPackageVersion(t *testing.T) {
	at := time.Date(2026, 11, 27, 20, 35, 59, 0, time.UTC)
	for _, tc := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2", "1.2"},
		{"v1.2.3-rc.1", "1.2.3~rc.1"},
		{"v1.2.3-rc1-4-gabc1234", "1.2.3~rc1+4.gabc1234"},
		{"v1.2.3-4-gabc1234", "1.2.3+4.gabc1234"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+4.gabc1234.dirty"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"f161473", "0.0.0~git20261127203559.f161473"},
		{"f161473-dirty", "0.0.0~git20261127203559.f161473.dirty"},
		{"1234567", "0.0.0~git20261127203559.1234567"}, // a hash of digits is no tag
	} {
		got, err := PackageVersion(tc.in, at)
		if err != nil || got != tc.want {
			t.Errorf("PackageVersion(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "dev", "1.2.3", "v1.2.3 ", "v1.2.3-4-gxyz", "release-1", "f161473-modified"} {
		if got, err := PackageVersion(bad, at); err == nil {
			t.Errorf("PackageVersion(%q) = %q, want an error", bad, got)
		}
	}
}

// The mapping orders as releases go, by dpkg's rules (rpm's agree for
// these forms: '~' before anything, '+' and '.' separators).
func TestPackageVersionOrder(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Fatalf("dpkg (Debian's; CI has it): %v", err)
	}
	early := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	order := []struct {
		v  string
		at time.Time
	}{
		{"abc1234", early},
		{"abc1234-dirty", early},
		{"0123def", early.Add(time.Hour)},
		{"v0.1.0-rc.1", early},
		{"v0.1.0", early},
		{"v0.1.0-1-gabc1234", early},
		{"v0.1.0-1-gabc1234-dirty", early},
		{"v0.1.0-2-g0000000", early},
		{"v0.1.1", early},
		{"v1.0.0", early},
	}
	for i := 1; i < len(order); i++ {
		a, _ := PackageVersion(order[i-1].v, order[i-1].at)
		b, _ := PackageVersion(order[i].v, order[i].at)
		if out, err := exec.Command(dpkg, "--compare-versions", a, "lt", b).CombinedOutput(); err != nil {
			t.Errorf("dpkg: %s (%s) is not before %s (%s): %v %s", a, order[i-1].v, b, order[i].v, err, out)
		}
	}
}

// The maintainer scripts render and are valid sh; each format has the
// four actions it needs.
func TestScripts(t *testing.T) {
	for _, f := range []string{"deb", "rpm"} {
		dir := t.TempDir()
		s, err := renderScripts(f, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{s.PreInstall, s.PostInstall, s.PreRemove, s.PostRemove} {
			if p == "" {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, []byte("#!/bin/sh\n")) || bytes.Contains(b, []byte("{{")) {
				t.Errorf("%s:\n%s", p, b)
			}
			if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
				t.Errorf("sh -n %s: %v\n%s", filepath.Base(p), err, out)
			}
		}
		all := ""
		for _, p := range []string{s.PreInstall, s.PostInstall, s.PreRemove, s.PostRemove} {
			b, _ := os.ReadFile(p)
			all += string(b)
		}
		for _, must := range []string{"useradd --system", "/var/lib/wanda", "/var/log/wanda", "daemon-reload", "wanda-server.service"} {
			if !strings.Contains(all, must) {
				t.Errorf("%s scripts do not have %q", f, must)
			}
		}
		if strings.Contains(all, "enable ") && !strings.Contains(all, "disable --now") {
			t.Errorf("%s scripts enable a unit", f)
		}
	}
}

// The same entries in any order give the same tar.
func TestWriteTarDeterministic(t *testing.T) {
	at := time.Unix(1795734422, 0)
	e := []entry{{name: "b", mode: 0o644, data: []byte("b")}, {name: "a/", mode: 0o755}, {name: "a/c", mode: 0o600, uid: 7, gid: 7, data: []byte("c")}}
	var x, y bytes.Buffer
	if err := writeTar(&x, append([]entry(nil), e...), at); err != nil {
		t.Fatal(err)
	}
	if err := writeTar(&y, []entry{e[2], e[0], e[1]}, at); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x.Bytes(), y.Bytes()) {
		t.Fatal("two tars of the same entries differ")
	}
	g1, _ := gzipBytes(x.Bytes(), 9)
	g2, _ := gzipBytes(x.Bytes(), 9)
	if !bytes.Equal(g1, g2) || g1[4]|g1[5]|g1[6]|g1[7] != 0 {
		t.Fatal("gzip header carries a time or differs")
	}
}

func TestCABundle(t *testing.T) {
	rest, n := caBundle(), 0
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatalf("root %d: %v", n, err)
		}
		n++
	}
	if n < 100 || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%d roots (%d bytes left over), want the NSS store's 100+", n, len(rest))
	}
}

// The SBOM of binaries lists the modules linked into it
// with their versions, the toolchain, and edges of the graph given.
func TestSBOM(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/wanda-fed/wanda", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: "github.com/goreleaser/nfpm/v2", Version: "v2.45.2", Sum: "h1:abc="},
			{Path: "github.com/google/rpmpack", Version: "v0.7.1", Sum: "h1:def="},
			{Path: "github.com/spf13/cobra", Version: "v1.10.2", Sum: "h1:ghi="},
		},
		Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}, {Key: "CGO_ENABLED", Value: "0"}}}
	exe := []*debug.BuildInfo{bi, bi}
	graph := [][2]string{
		{"github.com/wanda-fed/wanda", "github.com/goreleaser/nfpm/v2@v2.45.2"},
		{"github.com/goreleaser/nfpm/v2@v2.45.2", "github.com/google/rpmpack@v0.0.0-x"},
	}
	var b bytes.Buffer
	if err := writeSBOM(&b, exe, graph, "v1.2.3", "0123abcd", time.Unix(1795734422, 0)); err != nil {
		t.Fatal(err)
	}
	var bom struct {
		SpecVersion string `json:"specVersion"`
		Serial      string `json:"serialNumber"`
		Metadata    struct {
			Timestamp string `json:"timestamp"`
			Component struct{ Name, Version, Purl string }
		}
		Components []struct {
			Name, Version, Purl string
		}
		Dependencies []struct {
			Ref       string   `json:"ref"`
			DependsOn []string `json:"dependsOn"`
		}
	}
	if err := json.Unmarshal(b.Bytes(), &bom); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if bom.SpecVersion != "1.6" || bom.Metadata.Component.Name != "wanda" || bom.Metadata.Timestamp != "2026-11-26T23:07:02Z" || !strings.HasPrefix(bom.Serial, "urn:uuid:") {
		t.Errorf("metadata: %+v %s %s", bom.Metadata, bom.SpecVersion, bom.Serial)
	}
	found := map[string]string{}
	for _, c := range bom.Components {
		found[c.Name] = c.Version
	}
	if found["std"] == "" || found["github.com/goreleaser/nfpm/v2"] != "v2.45.2" || found["github.com/google/rpmpack"] != "v0.7.1" {
		t.Errorf("components: %v", found)
	}
	edges := map[string][]string{}
	for _, d := range bom.Dependencies {
		edges[d.Ref] = d.DependsOn
	}
	nfpm := purl("github.com/goreleaser/nfpm/v2", "v2.45.2")
	if !slices.Contains(edges[purl("github.com/wanda-fed/wanda", "v1.2.3")], nfpm) || len(edges[nfpm]) != 1 ||
		!slices.Contains(edges[purl("github.com/wanda-fed/wanda", "v1.2.3")], purl("github.com/spf13/cobra", "v1.10.2")) {
		t.Errorf("edges: %v", edges)
	}
	var again bytes.Buffer
	if err := writeSBOM(&again, exe, graph, "v1.2.3", "0123abcd", time.Unix(1795734422, 0)); err != nil || !bytes.Equal(b.Bytes(), again.Bytes()) {
		t.Errorf("two SBOMs of the same input differ (%v)", err)
	}
}

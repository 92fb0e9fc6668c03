package dist

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"
)

// Units are the systemd units of deploy/systemd that the packages install,
// each disabled until the admin enables it.
var Units = []string{"wanda-server.service", "wanda-redirector.service", "wanda-cache.service", "wanda-transfer.service"}

// Configs are the example configurations of deploy/config, installed as
// /etc/wanda/NAME: conffiles (deb) and %config(noreplace) (rpm).
var Configs = []string{"server.yaml", "redirector.yaml", "cache.yaml"}

//go:embed scripts/*.tmpl
var scriptFS embed.FS

// scriptNames maps each format's maintainer scripts to their templates:
// deb runs preinst/postinst/prerm/postrm with actions, rpm %pre/%post/
// %preun/%postun with counts, so each format has its own, sharing the
// definitions of scripts/common.tmpl.
var scriptNames = map[string][4]string{ // pre-install, post-install, pre-remove, post-remove
	"deb": {"", "deb-postinst", "deb-prerm", "deb-postrm"},
	"rpm": {"rpm-pre", "rpm-post", "rpm-preun", "rpm-postun"},
}

// renderScripts writes a format's maintainer scripts into dir and returns
// them as nfpm takes them.
func renderScripts(format, dir string) (nfpm.Scripts, error) {
	t, err := template.ParseFS(scriptFS, "scripts/*.tmpl")
	if err != nil {
		return nfpm.Scripts{}, err
	}
	var paths [4]string
	for i, name := range scriptNames[format] {
		if name == "" {
			continue
		}
		var b bytes.Buffer
		data := map[string]string{"Format": format, "Script": strings.TrimPrefix(name, format+"-"), "Units": strings.Join(Units, " ")}
		if err := t.ExecuteTemplate(&b, name+".tmpl", data); err != nil {
			return nfpm.Scripts{}, fmt.Errorf("script %s: %w", name, err)
		}
		paths[i] = filepath.Join(dir, name)
		if err := os.WriteFile(paths[i], b.Bytes(), 0o755); err != nil {
			return nfpm.Scripts{}, err
		}
	}
	return nfpm.Scripts{PreInstall: paths[0], PostInstall: paths[1], PreRemove: paths[2], PostRemove: paths[3]}, nil
}

// staged is what both formats install besides the binary, prepared once in
// a work directory: units, configurations, man pages, completions, docs.
type staged struct {
	dir     string
	man     []string // file names under dir/man
	scripts map[string]nfpmScripts
}

// contents lists a package's files. One list for both formats; where a
// distribution family puts a file elsewhere (zsh completions), the entry
// names its packager.
func (s *staged) contents(binary string, mtime time.Time) files.Contents {
	file := func(src, dst string, mode os.FileMode, typ, packager string) *files.Content {
		return &files.Content{Source: src, Destination: dst, Type: typ, Packager: packager,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: mtime}}
	}
	in := func(p ...string) string { return filepath.Join(append([]string{s.dir}, p...)...) }
	c := files.Contents{
		file(binary, "/usr/bin/wanda", 0o755, "", ""),
		{Destination: "/etc/wanda", Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: 0o755, MTime: mtime}},
		file(in("logrotate"), "/etc/logrotate.d/wanda", 0o644, files.TypeConfigNoReplace, ""),
		file(in("completion", "wanda.bash"), "/usr/share/bash-completion/completions/wanda", 0o644, "", ""),
		file(in("completion", "_wanda"), "/usr/share/zsh/vendor-completions/_wanda", 0o644, "", "deb"),
		file(in("completion", "_wanda"), "/usr/share/zsh/site-functions/_wanda", 0o644, "", "rpm"),
		file(in("completion", "wanda.fish"), "/usr/share/fish/vendor_completions.d/wanda.fish", 0o644, "", ""),
		file(in("doc", "README.md"), "/usr/share/doc/wanda/README.md", 0o644, "", ""),
		file(in("doc", "install.md"), "/usr/share/doc/wanda/install.md", 0o644, "", ""),
	}
	for _, u := range Units {
		c = append(c, file(in("systemd", u), "/usr/lib/systemd/system/"+u, 0o644, "", ""))
	}
	for _, cfg := range Configs {
		c = append(c, file(in("config", cfg), "/etc/wanda/"+cfg, 0o644, files.TypeConfigNoReplace, ""))
	}
	for _, m := range s.man {
		c = append(c, file(in("man", m), "/usr/share/man/man1/"+m, 0o644, "", ""))
	}
	return c
}

// stageFiles copies deploy/'s units (the binary at /usr/bin, where the
// packages put it), configurations and logrotate file, and the docs, into
// dir.
func stageFiles(root, dir string) error {
	copyFile := func(src, dst string, edit func(string) string) error {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, dst)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, dst), []byte(edit(string(b))), 0o644)
	}
	same := func(s string) string { return s }
	for _, u := range Units {
		err := copyFile(filepath.Join("deploy", "systemd", u), filepath.Join("systemd", u), func(s string) string {
			return strings.ReplaceAll(s, "/usr/local/bin/wanda", "/usr/bin/wanda")
		})
		if err != nil {
			return err
		}
	}
	for _, c := range Configs {
		if err := copyFile(filepath.Join("deploy", "config", c), filepath.Join("config", c), same); err != nil {
			return err
		}
	}
	for src, dst := range map[string]string{
		"deploy/logrotate/wanda": "logrotate",
		"README.md":              "doc/README.md",
		"docs/install.md":        "doc/install.md",
	} {
		if err := copyFile(src, dst, same); err != nil {
			return err
		}
	}
	return nil
}

// Package metadata shared by both formats.
const (
	description = "WAN data access: a data federation for scientific data\n" +
		"One static binary with four roles: a data server exporting directories\n" +
		"over HTTP(S)/WebDAV and root://, redirectors that locate files across\n" +
		"sites, a block-level cache, and a transfer service; plus the client\n" +
		"verbs (cp, ls, stat, ...) and a FUSE mount. The systemd units are\n" +
		"installed disabled: see /usr/share/doc/wanda/install.md."
	homepage   = "https://github.com/wanda-fed/wanda"
	maintainer = "The wanda developers"
	// License: the repository carries no LICENSE file yet, so the
	// packages, the image and the SBOM assert none (SPDX NOASSERTION).
	license = "NOASSERTION"
)

// pkgArch names a Go architecture as each format does.
var pkgArch = map[string]map[string]string{
	"deb": {"amd64": "amd64", "arm64": "arm64"},
	"rpm": {"amd64": "x86_64", "arm64": "aarch64"},
}

// PackageFile is a package's file name in dist/ (a contract):
// wanda_VERSION_ARCH.deb, wanda-VERSION.ARCH.rpm, VERSION as `wanda
// version` prints it and ARCH as the format names it.
func PackageFile(format, version, goarch string) string {
	if format == "deb" {
		return fmt.Sprintf("wanda_%s_%s.deb", version, pkgArch["deb"][goarch])
	}
	return fmt.Sprintf("wanda-%s.%s.rpm", version, pkgArch["rpm"][goarch])
}

// writePackage builds one .deb or .rpm with nfpm into path.
func writePackage(format, goarch, pkgVersion, binary string, s *staged, mtime time.Time, path string) error {
	info := &nfpm.Info{
		Name:          "wanda",
		Arch:          pkgArch[format][goarch],
		Platform:      "linux",
		Version:       pkgVersion,
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    maintainer,
		Description:   description,
		Vendor:        "wanda",
		Homepage:      homepage,
		License:       license,
		MTime:         mtime,
		Overridables: nfpm.Overridables{
			Contents: s.contents(binary, mtime),
			Scripts:  s.scripts[format],
			Umask:    0o022,
		},
	}
	var p nfpm.Packager
	switch format {
	case "deb":
		// useradd, groupadd, userdel (passwd is required-priority).
		info.Depends = []string{"passwd"}
		info.Recommends = []string{"logrotate"}
		p = deb.Default
	case "rpm":
		info.Depends = []string{"shadow-utils"}
		info.RPM = nfpm.RPM{Group: "System Environment/Daemons", Summary: "WAN data access: a data federation for scientific data",
			BuildHost: "reproducible", Compression: "gzip"}
		p = rpm.DefaultRPM
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.Validate(info); err != nil {
		return fmt.Errorf("%s %s: %w", format, goarch, err)
	}
	return writeAtomic(path, func(f *os.File) error { return p.Package(info, f) })
}

// writeAtomic writes path through a temporary file renamed into place: a
// failed build leaves no half package under the contract's name.
func writeAtomic(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

type nfpmScripts = nfpm.Scripts

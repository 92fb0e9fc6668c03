package interop

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// deploy/: every example configuration is accepted by its role's
// --check (its paths moved under a temp directory, the token issuer given
// a local key set so that nothing leaves the machine), a broken one is
// refused; every systemd unit passes systemd-analyze verify (the binary
// path pointed at the built one) and is hardened; the logrotate file
// passes logrotate's debug run.
func TestDeployFiles(t *testing.T) {
	wanda := wandaBinary(t)
	root := filepath.Join("..", "..", "deploy")
	tmp := t.TempDir()
	for _, d := range []string{"srv/wanda/store", "srv/wanda/test", "log", "cache"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	jwks := filepath.Join(tmp, "issuer.jwks")
	if out, err := exec.Command(wanda, "token", "keygen", "--out", filepath.Join(tmp, "issuer.pem"), "--jwks", jwks).CombinedOutput(); err != nil {
		t.Fatalf("token keygen: %v\n%s", err, out)
	}
	local := strings.NewReplacer("/srv/wanda", tmp+"/srv/wanda", "/var/log/wanda", tmp+"/log", "/var/cache/wanda", tmp+"/cache",
		"url: https://tokens.example.org", "url: https://tokens.example.org\n        jwks_file: "+jwks)
	for _, role := range []string{"server", "redirector", "cache"} {
		b, err := os.ReadFile(filepath.Join(root, "config", role+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(tmp, role+".yaml")
		if err := os.WriteFile(cfg, []byte(local.Replace(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(wanda, role, "--config", cfg, "--check").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "the configuration is valid") {
			t.Errorf("wanda %s --check of deploy/config/%s.yaml: %v\n%s", role, role, err, out)
		}
		// A key that does not exist: refused, named.
		bad := filepath.Join(tmp, role+"-bad.yaml")
		if err := os.WriteFile(bad, []byte(local.Replace(string(b))+"\nbogus_key: 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err = exec.Command(wanda, role, "--config", bad, "--check").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "bogus_key") {
			t.Errorf("wanda %s --check of a config with an unknown key: %v\n%s", role, err, out)
		}
	}

	analyze := requireTool(t, "systemd-analyze")
	units, _ := filepath.Glob(filepath.Join(root, "systemd", "*.service"))
	if len(units) != 4 {
		t.Fatalf("deploy/systemd has %d units, want server, redirector, cache and transfer", len(units))
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, must := range []string{"User=wanda", "NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=\n", "PrivateTmp=yes"} {
			if !strings.Contains(string(b), must) {
				t.Errorf("%s: not hardened: no %q", filepath.Base(u), strings.TrimSpace(must))
			}
		}
		p := filepath.Join(tmp, filepath.Base(u))
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/wanda", wanda)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", p).CombinedOutput()
		// verify also complains about units it cannot see here (the
		// user's manager, network-online.target on a minimal system):
		// only lines naming this unit count.
		var problems []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, filepath.Base(u)) {
				problems = append(problems, l)
			}
		}
		if len(problems) > 0 || err != nil {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(u), err, out)
		}
	}

	lr := requireTool(t, "logrotate")
	b, err := os.ReadFile(filepath.Join(root, "logrotate", "wanda"))
	if err != nil {
		t.Fatal(err)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	grp, err := user.LookupGroupId(me.Gid)
	if err != nil {
		t.Fatal(err)
	}
	// The wanda account does not exist here: this user's instead.
	conf := filepath.Join(tmp, "logrotate.conf")
	if err := os.WriteFile(conf, []byte(strings.ReplaceAll(string(b), "wanda wanda", me.Username+" "+grp.Name)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(lr, "-d", "-s", filepath.Join(tmp, "logrotate.state"), conf).CombinedOutput()
	if err != nil || strings.Contains(strings.ToLower(string(out)), "error") {
		t.Errorf("logrotate -d deploy/logrotate/wanda: %v\n%s", err, out)
	}
}

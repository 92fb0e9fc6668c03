package cred

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// isolate clears every variable discovery reads and points the default
// places at empty directories. It reports whether the real /tmp holds a
// default token file of this user (then "nothing found" cannot be
// tested).
func isolate(t *testing.T) (xdg, tmp string, realTmp bool) {
	t.Helper()
	for _, v := range []string{"BEARER_TOKEN", "BEARER_TOKEN_FILE", "X509_USER_PROXY", "X509_CERT_DIR"} {
		t.Setenv(v, "")
	}
	xdg, tmp = t.TempDir(), t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	t.Setenv("TMPDIR", tmp)
	return xdg, tmp, exists("/tmp/bt_u" + strconv.Itoa(os.Getuid()))
}

func writeTok(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func tokenOf(t *testing.T, s *TokenSource) string {
	t.Helper()
	tok, err := s.Token()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestDiscoveryOrder(t *testing.T) {
	xdg, tmp, realTmp := isolate(t)
	dir := t.TempDir()
	name := "bt_u" + strconv.Itoa(os.Getuid())
	flag := writeTok(t, filepath.Join(dir, "flag"), "from-flag\n")
	file := writeTok(t, filepath.Join(dir, "file"), "  from-file  \n")
	writeTok(t, filepath.Join(xdg, name), "from-xdg\n")
	writeTok(t, filepath.Join(tmp, name), "from-tmp")
	t.Setenv("BEARER_TOKEN_FILE", file)
	t.Setenv("BEARER_TOKEN", " from-env\n")

	// Each source in turn, then removed for the next step.
	steps := []struct {
		explicit, tok, where string
		remove               func()
	}{
		{flag, "from-flag", flag, func() {}},
		{"", "from-env", "BEARER_TOKEN", func() { t.Setenv("BEARER_TOKEN", "") }},
		{"", "from-file", file, func() { t.Setenv("BEARER_TOKEN_FILE", "") }},
		{"", "from-xdg", filepath.Join(xdg, name), func() { t.Setenv("XDG_RUNTIME_DIR", "") }},
		{"", "from-tmp", filepath.Join(tmp, name), func() {}},
	}
	for _, st := range steps {
		s, err := DiscoverToken(st.explicit)
		if err != nil || s == nil {
			t.Fatalf("want %s: %v %v", st.tok, s, err)
		}
		if got := tokenOf(t, s); got != st.tok || s.Where() != st.where {
			t.Fatalf("got %q from %s, want %q from %s", got, s.Where(), st.tok, st.where)
		}
		st.remove()
	}
	// A missing default file is skipped: XDG set but empty falls through
	// to the temporary directory.
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	if s, err := DiscoverToken(""); err != nil || tokenOf(t, s) != "from-tmp" {
		t.Fatalf("XDG without the file: %v %v", s, err)
	}
	if !realTmp {
		if err := os.Remove(filepath.Join(tmp, name)); err != nil {
			t.Fatal(err)
		}
		if s, err := DiscoverToken(""); s != nil || err != nil {
			t.Fatalf("nothing anywhere: %v %v", s, err)
		}
	}
	// A variable naming a file that is not there is an error, not a
	// reason to look further (the user said where the token is).
	t.Setenv("BEARER_TOKEN_FILE", filepath.Join(dir, "missing"))
	if _, err := DiscoverToken(""); err == nil || !strings.Contains(err.Error(), "BEARER_TOKEN_FILE") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("BEARER_TOKEN_FILE missing: %v", err)
	}
	if _, err := DiscoverToken(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("--token of a missing file: no error")
	}
}

func TestAbsurdTokensRefused(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	secret := "eyJhbGciOiJFUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.c2lnbmF0dXJl"
	for _, c := range []struct{ name, content, want string }{
		{"empty", "", "empty"},
		{"blank", " \n\t\n", "empty"},
		{"two words", secret + " " + secret, "whitespace"},
		{"two lines", secret + "\n" + secret + "\n", "whitespace"},
		{"tab", secret + "\t" + secret, "whitespace"},
		{"control", secret + "\x01", "cannot hold"},
		{"nul", secret + "\x00" + secret, "cannot hold"},
		{"utf-8", secret + "é", "cannot hold"},
		{"large", strings.Repeat(secret, MaxTokenBytes/len(secret)+1), "not a token"},
		{"huge", strings.Repeat(secret, 1<<20/len(secret)), "not a token"},
	} {
		p := writeTok(t, filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")), c.content)
		_, err := File(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), secret[:12]) || strings.Contains(err.Error(), secret[20:32]) {
			t.Errorf("%s: the error quotes the token: %v", c.name, err)
		}
		if strings.TrimSpace(c.content) != "" && !strings.Contains(c.content, "\x00") {
			t.Setenv("BEARER_TOKEN", c.content)
			_, err := DiscoverToken("")
			if err == nil || strings.Contains(err.Error(), secret[:12]) || !strings.Contains(err.Error(), "BEARER_TOKEN") {
				t.Errorf("%s in BEARER_TOKEN: %v", c.name, err)
			}
			t.Setenv("BEARER_TOKEN", "")
		}
	}
	// Exactly the limit is a token.
	big := strings.Repeat("a", MaxTokenBytes)
	if s, err := File(writeTok(t, filepath.Join(dir, "max"), big+"\n")); err != nil || tokenOf(t, s) != big {
		t.Fatalf("a token of %d bytes: %v", MaxTokenBytes, err)
	}
}

func TestTokenFileReread(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	p := writeTok(t, filepath.Join(dir, "tok"), "tok-1\n")
	s, err := File(p)
	if err != nil {
		t.Fatal(err)
	}
	if tokenOf(t, s) != "tok-1" {
		t.Fatal("first read")
	}

	// Rewritten in place, same size: the mtime tells (set apart, as a
	// coarse-grained file system might not).
	writeTok(t, p, "tok-2\n")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.Renew(); err != nil || tok != "tok-2" {
		t.Fatalf("Renew after an in-place rewrite: %q %v", tok, err)
	}

	// Replaced by a rename (same size, same mtime): the inode tells.
	tmp := writeTok(t, filepath.Join(dir, "tok.new"), "tok-3\n")
	if err := os.Chtimes(tmp, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	// Token looks again within about a second, without Renew.
	waitFor(t, 5*time.Second, func() bool { tok, err := s.Token(); return err == nil && tok == "tok-3" })

	// Between a truncation and the write, and while the file is gone,
	// the known token stays in use.
	writeTok(t, p, "")
	if tok, err := s.Renew(); err != nil || tok != "tok-3" {
		t.Fatalf("empty file: %q %v", tok, err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.Renew(); err != nil || tok != "tok-3" {
		t.Fatalf("missing file: %q %v", tok, err)
	}
	writeTok(t, p, "tok-4")
	if tok, err := s.Renew(); err != nil || tok != "tok-4" {
		t.Fatalf("written again: %q %v", tok, err)
	}

	// Junk written over it is an error (the old token is not silently
	// kept) that names the file, not the text; until the file changes.
	writeTok(t, p, "tok-5 tok-6")
	if _, err := s.Renew(); err == nil || strings.Contains(err.Error(), "tok-5") || !strings.Contains(err.Error(), p) {
		t.Fatalf("junk: %v", err)
	}
	if _, err := s.Token(); err == nil {
		t.Fatal("junk: Token gave a token")
	}
	writeTok(t, p, "tok-7")
	if tok, err := s.Renew(); err != nil || tok != "tok-7" {
		t.Fatalf("fixed: %q %v", tok, err)
	}

	// A fixed token is what it is.
	f, err := Fixed("\tfixed\n", "BEARER_TOKEN")
	if err != nil || tokenOf(t, f) != "fixed" {
		t.Fatalf("Fixed: %v", err)
	}
	if tok, _ := f.Renew(); tok != "fixed" {
		t.Fatal("Fixed.Renew")
	}
}

// TestTokenConcurrent reads a token from many goroutines while the file
// is replaced (run with -race).
func TestTokenConcurrent(t *testing.T) {
	dir := t.TempDir()
	p := writeTok(t, filepath.Join(dir, "tok"), "a0")
	s, err := File(p)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errc := make(chan error, 8)
	for range 8 {
		go func() {
			for {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				tok, err := s.Token()
				if err == nil && !strings.HasPrefix(tok, "a") {
					err = errors.New("bad token " + tok)
				}
				if err != nil {
					errc <- err
					return
				}
				if _, err := s.Renew(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for i := range 50 {
		tmp := writeTok(t, filepath.Join(dir, "new"), "a"+strconv.Itoa(i))
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 8 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

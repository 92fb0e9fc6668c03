// Package cred finds a client's credentials the way grid tools do: a
// bearer token in the WLCG Bearer Token Discovery order, a grid proxy or
// a certificate for HTTPS, and the CAs to trust (X509_CERT_DIR). It holds
// no server code: the client engine, the CLI and the cache's upstream
// reads use it.
//
// Nothing here ever puts a token's text in an error: messages name where
// a token came from (BEARER_TOKEN, a file's path) and what is wrong with
// it, so that they can be logged and shown.
package cred

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxTokenBytes bounds a token read from anywhere.
const MaxTokenBytes = 16 << 10

// recheck is how often Token (and ClientCert) look at a file's metadata.
var recheck = time.Second

// TokenSource gives the current token of one place: an environment
// variable's value, or a file that is read again when it changes (a long
// transfer outlives the token it started with: renewers such as
// htgettoken or oidc-agent rewrite the file before it expires).
// Safe for concurrent use.
type TokenSource struct {
	where string // "BEARER_TOKEN" or the file's path, for messages
	file  string // "" for a fixed token

	mu      sync.Mutex
	tok     string // last good token
	err     error  // what is wrong with the file now, if anything
	stamp   fileStamp
	checked time.Time
}

// fileStamp is what tells a changed file: a new inode (a renewer that
// writes a temporary file and renames it), a new size or mtime (one that
// rewrites in place).
type fileStamp struct {
	fi os.FileInfo
}

func (a fileStamp) same(b os.FileInfo) bool {
	return a.fi != nil && b != nil && os.SameFile(a.fi, b) &&
		a.fi.Size() == b.Size() && a.fi.ModTime().Equal(b.ModTime())
}

// Where says where the token comes from (never the token).
func (s *TokenSource) Where() string { return s.where }

// Fixed is a source of one token (BEARER_TOKEN, tests).
func Fixed(tok, where string) (*TokenSource, error) {
	tok, err := clean(tok, where)
	if err != nil {
		return nil, err
	}
	return &TokenSource{where: where, tok: tok}, nil
}

// File is a source that reads path now (an error when it holds no usable
// token) and again whenever it changes.
func File(path string) (*TokenSource, error) {
	s := &TokenSource{where: path, file: path}
	if _, err := s.Renew(); err != nil {
		return nil, err
	}
	return s, nil
}

// Token returns the current token. It is cheap enough for every request:
// a file's metadata is looked at no more than once a second, and the file
// is read only when it changed (see Renew for what a change can give).
func (s *TokenSource) Token() (string, error) {
	if s.file == "" {
		return s.tok, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); !s.checked.IsZero() && now.Sub(s.checked) < recheck {
		return s.current()
	}
	return s.load()
}

// Renew looks at the file now, whatever the time since the last look:
// after a server refused the token (401), a renewed file may hold a new
// one. A fixed source gives its token again.
//
// A file that vanished, cannot be read or is empty while a token was
// known leaves that token in use (a renewer may be between truncating
// and writing, and the server is the judge of an old token), and the
// file is looked at again on the next call. A file that holds something
// that cannot be a token is an error until it changes.
func (s *TokenSource) Renew() (string, error) {
	if s.file == "" {
		return s.tok, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load()
}

func (s *TokenSource) current() (string, error) {
	if s.err != nil {
		return "", s.err
	}
	return s.tok, nil
}

// load reads the file if it changed. s.mu is held.
func (s *TokenSource) load() (string, error) {
	s.checked = time.Now()
	fi, err := os.Stat(s.file)
	if err == nil && s.stamp.same(fi) {
		return s.current()
	}
	var b []byte
	if err == nil {
		if fi.Size() > MaxTokenBytes+64 {
			// Not read at all: it is no token, and may be large.
			s.stamp, s.err = fileStamp{fi}, fmt.Errorf("token file %s: %d bytes is not a token (at most %d)", s.file, fi.Size(), MaxTokenBytes)
			return "", s.err
		}
		b, err = readAtMost(s.file, MaxTokenBytes+64)
	}
	if err != nil || strings.TrimSpace(string(b)) == "" {
		if s.tok != "" {
			// Keep the known token; look again next time (no stamp).
			s.stamp, s.err = fileStamp{}, nil
			return s.tok, nil
		}
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		return "", fmt.Errorf("token file %s is empty", s.file)
	}
	tok, err := clean(string(b), s.file)
	s.stamp = fileStamp{fi}
	if err != nil {
		s.err = err
		return "", err
	}
	s.tok, s.err = tok, nil
	return tok, nil
}

// readAtMost reads up to n+1 bytes of a file (it may grow between the
// stat and the read: clean then refuses it).
func readAtMost(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n+1))
}

// clean trims a token and refuses what cannot be one (RFC 6750 b64token
// is printable ASCII without spaces; a header value must hold no control
// character). The error never shows the text.
func clean(tok, where string) (string, error) {
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "":
		return "", fmt.Errorf("token from %s is empty", where)
	case len(tok) > MaxTokenBytes:
		return "", fmt.Errorf("token from %s: %d bytes is not a token (at most %d)", where, len(tok), MaxTokenBytes)
	}
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return "", fmt.Errorf("token from %s has whitespace inside (byte %d): not one token", where, i)
		case c < 0x21 || c > 0x7e:
			return "", fmt.Errorf("token from %s has a byte a token cannot hold (0x%02x at byte %d)", where, c, i)
		}
	}
	return tok, nil
}

// tmpDirs are where the default files (bt_u$UID, x509up_u$UID) are looked
// for: the WLCG and Globus conventions name /tmp; $TMPDIR, when set
// elsewhere, is looked at first.
func tmpDirs() []string {
	dirs := []string{}
	if d := os.TempDir(); d != "/tmp" {
		dirs = append(dirs, d)
	}
	return append(dirs, "/tmp")
}

// DiscoverToken finds a token: explicit (a file, the --token flag) wins;
// else BEARER_TOKEN (the token itself), BEARER_TOKEN_FILE,
// $XDG_RUNTIME_DIR/bt_u$UID, /tmp/bt_u$UID, in that order (WLCG Bearer
// Token Discovery; $TMPDIR/bt_u$UID before /tmp when TMPDIR is set). A
// variable set to a file that cannot be read is an error, not a reason
// to look further; the default files are skipped when missing.
// nil, nil when there is none.
func DiscoverToken(explicit string) (*TokenSource, error) {
	if explicit != "" {
		return File(explicit)
	}
	if v, ok := os.LookupEnv("BEARER_TOKEN"); ok && strings.TrimSpace(v) != "" {
		return Fixed(v, "BEARER_TOKEN")
	}
	if p := os.Getenv("BEARER_TOKEN_FILE"); p != "" {
		s, err := File(p)
		if err != nil {
			return nil, fmt.Errorf("BEARER_TOKEN_FILE: %w", err)
		}
		return s, nil
	}
	name := "bt_u" + strconv.Itoa(os.Getuid())
	var dirs []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range append(dirs, tmpDirs()...) {
		s, err := File(filepath.Join(d, name))
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return s, err
		}
	}
	return nil, nil
}

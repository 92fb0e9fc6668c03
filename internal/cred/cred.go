// Package cred finds a client's credentials the way grid tools do: a
// bearer token in the WLCG Bearer Token Discovery order, a grid proxy or
// a certificate for HTTPS, and the CAs to trust (X509_CERT_DIR). It holds
// no server code: the client engine, the CLI and the cache's upstream
// reads use it.
package cred

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxTokenBytes bounds a token read from anywhere.
const MaxTokenBytes = 16 << 10

// recheck is how often a token file's mtime and size are looked at.
const recheck = time.Second

// TokenSource gives the current token of one place: an environment
// variable's value, or a file that is read again when it changes (a long
// transfer outlives the token it started with).
type TokenSource struct {
	where string // "BEARER_TOKEN" or the file's path, for messages
	file  string // "" for a fixed token

	mu      sync.Mutex
	tok     string
	err     error
	mtime   time.Time
	size    int64
	checked time.Time
}

// Where says where the token comes from (never the token).
func (s *TokenSource) Where() string { return s.where }

// Fixed is a source of one token (tests, and BEARER_TOKEN).
func Fixed(tok, where string) (*TokenSource, error) {
	tok, err := clean(tok, where)
	if err != nil {
		return nil, err
	}
	return &TokenSource{where: where, tok: tok}, nil
}

// File is a source that reads path, and again whenever it changes.
func File(path string) (*TokenSource, error) {
	s := &TokenSource{where: path, file: path}
	if _, err := s.Token(); err != nil {
		return nil, err
	}
	return s, nil
}

// Token returns the current token. A file is checked at most once a
// second; when its size or mtime changed it is read again, and a file
// that became unreadable or absurd is an error (the last good token is
// not used: it is the one being replaced).
func (s *TokenSource) Token() (string, error) {
	if s.file == "" {
		return s.tok, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if !s.checked.IsZero() && now.Sub(s.checked) < recheck {
		return s.tok, s.err
	}
	s.checked = now
	fi, err := os.Stat(s.file)
	if err != nil {
		s.tok, s.err = "", fmt.Errorf("token file: %w", err)
		return s.tok, s.err
	}
	if s.tok != "" && fi.ModTime().Equal(s.mtime) && fi.Size() == s.size {
		return s.tok, nil
	}
	s.mtime, s.size = fi.ModTime(), fi.Size()
	if fi.Size() > MaxTokenBytes {
		s.tok, s.err = "", fmt.Errorf("token file %s: %d bytes is not a token (at most %d)", s.file, fi.Size(), MaxTokenBytes)
		return s.tok, s.err
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		s.tok, s.err = "", fmt.Errorf("token file: %w", err)
		return s.tok, s.err
	}
	s.tok, s.err = clean(string(b), s.file)
	return s.tok, s.err
}

// clean trims a token and refuses what cannot be one; the error never
// shows the text.
func clean(tok, where string) (string, error) {
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "":
		return "", fmt.Errorf("token from %s is empty", where)
	case len(tok) > MaxTokenBytes:
		return "", fmt.Errorf("token from %s: %d bytes is not a token (at most %d)", where, len(tok), MaxTokenBytes)
	case strings.ContainsAny(tok, " \t\r\n\x00"):
		return "", fmt.Errorf("token from %s has whitespace inside: not a token", where)
	}
	return tok, nil
}

// DiscoverToken finds a token: explicit (a file, the --token flag) wins;
// else BEARER_TOKEN, BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u$UID,
// /tmp/bt_u$UID, in that order (WLCG Bearer Token Discovery). nil, nil
// when there is none.
func DiscoverToken(explicit string) (*TokenSource, error) {
	if explicit != "" {
		return File(explicit)
	}
	if v, ok := os.LookupEnv("BEARER_TOKEN"); ok && strings.TrimSpace(v) != "" {
		return Fixed(v, "BEARER_TOKEN")
	}
	if p := os.Getenv("BEARER_TOKEN_FILE"); p != "" {
		return File(p)
	}
	name := "bt_u" + strconv.Itoa(os.Getuid())
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		if s, err := File(filepath.Join(d, name)); err == nil || !errors.Is(err, os.ErrNotExist) {
			return s, err
		}
	}
	if s, err := File(filepath.Join(os.TempDir(), name)); err == nil || !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	return nil, nil
}

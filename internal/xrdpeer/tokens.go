package xrdpeer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Tokens makes a server take bearer tokens as grid sites set XRootD up:
// its SciTokens plugin authorizes every request (`ofs.authorize 1`,
// `ofs.authlib libXrdAccSciTokens.so`), root:// clients present their
// token with the ztn security protocol (`sec.protocol ztn`), and XrdHttp
// takes it from the Authorization header. ztn is for TLS connections
// only, so XRootD then switches every client able to do TLS to TLS
// before login (kXR_tlsLogin): Options.TLSCert is required. A client
// without a token cannot log in over root:// (ztn is the only protocol
// offered).
type Tokens struct {
	// Issuer is the issuer's URL (the tokens' iss) and JWKS its public
	// keys (a JSON Web Key Set).
	Issuer string
	JWKS   []byte
	// Audience is the aud the tokens must carry.
	Audience string
	// BasePath is the logical directory the scopes are relative to
	// (default "/").
	BasePath string
}

// tokenSetup writes the SciTokens plugin's configuration and
// scitokens-cpp's key cache into work, and returns the configuration
// lines and the daemon's environment.
//
// scitokens-cpp (0.7 as Debian ships it) fetches an issuer's keys with
// libcurl against the system's CA store only, which a test issuer on
// loopback is not in; its key cache (an SQLite file under
// $XDG_CACHE_HOME/scitokens) is filled with the issuer's keys instead,
// as a site cut off from its issuer would have them, and the daemon is
// given that XDG_CACHE_HOME.
func tokenSetup(o Options, work string, acct account) (lines, env []string, err error) {
	tk := o.Tokens
	switch {
	case o.TLSCert == "":
		return nil, nil, errors.New("xrdpeer: Tokens need TLSCert (ztn is for TLS connections only)")
	case tk.Issuer == "" || len(tk.JWKS) == 0 || tk.Audience == "":
		return nil, nil, errors.New("xrdpeer: Tokens need Issuer, JWKS and Audience")
	case strings.ContainsAny(tk.Issuer+tk.Audience+tk.BasePath, "\n\r"):
		return nil, nil, errors.New("xrdpeer: Tokens: a line break in Issuer, Audience or BasePath")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: python3 (with sqlite3) is needed to fill scitokens-cpp's key cache", ErrNotInstalled)
	}
	base := tk.BasePath
	if base == "" {
		base = "/"
	}
	cfg := filepath.Join(work, "scitokens.cfg")
	text := fmt.Sprintf("[Global]\naudience = %s\n\n[Issuer test]\nissuer = %s\nbase_path = %s\ndefault_user = xrootd\n", tk.Audience, tk.Issuer, base)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return nil, nil, err
	}
	cache := filepath.Join(work, "cache")
	if err := os.MkdirAll(filepath.Join(cache, "scitokens"), 0o755); err != nil {
		return nil, nil, err
	}
	now := time.Now().Unix()
	val := fmt.Sprintf(`{"expires": %d, "jwks": %s, "next_update": %d}`, now+24*3600, tk.JWKS, now+24*3600)
	const script = `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE IF NOT EXISTS keycache (issuer text UNIQUE PRIMARY KEY NOT NULL, keys text NOT NULL)")
db.execute("INSERT OR REPLACE INTO keycache (issuer, keys) VALUES (?, ?)", (sys.argv[2], sys.argv[3]))
db.commit()
`
	db := filepath.Join(cache, "scitokens", "scitokens_cpp.sqllite")
	if out, err := exec.Command(py, "-c", script, db, tk.Issuer, val).CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("xrdpeer: fill scitokens-cpp's key cache: %v: %s", err, out)
	}
	// The daemon writes the cache (its journal) too.
	if err := acct.own(cache); err != nil {
		return nil, nil, err
	}
	lines = []string{
		"ofs.authorize 1",
		"ofs.authlib libXrdAccSciTokens.so config=" + cfg,
		"xrootd.seclib libXrdSec.so",
		"sec.protocol ztn",
	}
	if o.HTTP {
		lines = append(lines, "http.header2cgi Authorization authz")
	}
	return lines, []string{"XDG_CACHE_HOME=" + cache}, nil
}

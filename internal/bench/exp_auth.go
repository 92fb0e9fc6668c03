package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// The auth experiment: what authentication costs, in one run.
//
//   - small GETs: wrk against one wanda server (a child process) that
//     trusts a token issuer through an offline JWKS file: 4 KiB GETs
//     anonymous, with a valid bearer token in every request, and (for
//     information) with a refused one; requests/s, the server's CPU per
//     request, goal token/anonymous >= 0.97;
//   - HTTPS: one page-cached file read whole with curl over TLS from a
//     wanda server and from XRootD's XrdHttp (package xrdpeer, TLS, the
//     same directory); goal wanda/XrdHttp >= 1.0, plain HTTP beside them
//     as the ceiling without TLS.
//
// The targets take turns (the order reverses every round or repetition)
// and the ratios are medians of ratios between neighbours in time.

func init() {
	Register(&Experiment{
		Name:  "auth",
		Seed:  "000",
		Title: "Authentication cost: 4 KiB GETs with and without a bearer token (wrk), HTTPS whole-file reads vs XrdHttp over TLS (curl)",
		Doc: "A wanda server (`wanda server` as a child process, JSON log at info level as deployed) trusting one token issuer " +
			"through an offline JWKS file (`--token-issuer`, `--token-keys`, `--token-audience`; anonymous reads allowed) serves " +
			"a `small` file to wrk (`threads` threads, `conns` connections, `duration` per measurement): anonymously; " +
			"anonymously with an X-Padding header as long as the token's (what the bytes alone cost HTTP); with a valid WLCG " +
			"token (`alg`, storage.read:/) in every request's Authorization header; and with an expired token of the same " +
			"issuer (every answer a 401); `rounds` times per repetition, the order reversed every round. Rows give " +
			"requests/s, wrk's non-2xx count and socket errors, and the server's and wrk's CPU per request; the summary the " +
			"median of the per-round ratios token/anonymous (goal >= 0.97: less than 3% fewer requests/s). Then one " +
			"page-cached file (`size`) is read whole with curl (one stream, to /dev/null, `passes` times back to back, " +
			"checked: status and size) over HTTPS from a wanda server with the same policy (`--tls-cert`; anonymous and, with " +
			"`https_token`, with the token) and from XRootD's XrdHttp with TLS on the same directory (package xrdpeer; " +
			"skipped with a note without xrootd), and over plain HTTP from both (wanda's is the ceiling without TLS); when the " +
			"two TLS stacks chose different ciphers (Go prefers AES-128-GCM, OpenSSL AES-256-GCM), wanda once more with curl " +
			"offering only XrdHttp's (`--tls13-ciphers`). MB/s and the median of the per-repetition ratios wanda/XrdHttp over " +
			"TLS (goal >= 1.0).",
		Params: []Param{
			{Name: "small", Help: "size of the file of the small GETs", Default: "4KiB"},
			{Name: "duration", Help: "wrk duration per measurement (whole seconds)", Default: "10s", Quick: "3s"},
			{Name: "conns", Help: "wrk connections (-c)", Default: "16"},
			{Name: "threads", Help: "wrk threads (-t)", Default: "2"},
			{Name: "rounds", Help: "wrk rounds per repetition (each target once per round)", Default: "3", Quick: "1"},
			{Name: "alg", Help: "the issuer's signature algorithm: RS256 (WLCG IAM, CILogon) or ES256", Default: "RS256"},
			{Name: "size", Help: "size of the file read whole over HTTPS", Default: "1GiB", Quick: "256MiB"},
			{Name: "passes", Help: "curl reads of the big file per measurement, back to back", Default: "3", Quick: "2"},
			{Name: "https_token", Help: "also read the big file from wanda over HTTPS with the token: yes/no", Default: "yes"},
			{Name: "parts", Help: "what to measure: gets (wrk) and/or https (curl)", Default: "gets https"},
		},
		Run: runAuthExp,
	})
}

const seed000Auth = `The seeds measured no authentication cost: their federations authenticated with GSI/X.509 (CMS AAA, seed 000) or ran test paths without authorization. The references here are measured in the same run: anonymous reads from the same server, and XRootD's XrdHttp over TLS on the same file.`

// The small GETs' targets.
const (
	authAnon = "anonymous"
	// authPadded is anonymous with a header as long as the token's
	// (X-Padding): what the bytes cost HTTP, without any verification.
	authPadded  = "anonymous + header of the token's size"
	authToken   = "token"
	authRefused = "refused token (401)"
)

// The whole-file targets.
const (
	authXrdTLS     = "XrdHttp https"
	authXrdHTTP    = "XrdHttp http"
	authWandaTLS   = "wanda https"
	authWandaTLSTk = "wanda https + token"
	authWandaHTTP  = "wanda http"
	// authWandaTLSX is wanda over HTTPS with curl offering only the
	// TLS 1.3 cipher XrdHttp negotiated (Go's server prefers AES-128-GCM,
	// OpenSSL AES-256-GCM): the same encryption on both sides.
	authWandaTLSX = "wanda https, XrdHttp's cipher"
)

// authEnv is what both parts share: the wanda servers and the tokens.
type authEnv struct {
	plain, tls     *childProc
	good, refused  string
	cert           string // the servers' certificate, curl's --cacert
	small, big     int64
	smallPath      string // URL path of the small file
	bigPath        string
	xrdHTTPS, xrdH string // XrdHttp's base URLs, "" when absent
	step, steps    int    // progress: points done, points in all
}

// next reports progress: the next point of all.
func (e *authEnv) next(r *Run, point string) {
	e.step++
	r.Step(point, e.step, max(e.steps, e.step))
}

func runAuthExp(ctx context.Context, r *Run) error {
	small, size := r.Size("small"), r.Size("size")
	dur, conns, threads := r.Duration("duration"), r.Int("conns"), r.Int("threads")
	rounds, passes := r.Int("rounds"), r.Int("passes")
	alg := strings.ToUpper(strings.TrimSpace(r.Str("alg")))
	httpsToken := netYes(r, "https_token")
	var wantGets, wantHTTPS bool
	for _, p := range fields(r.Str("parts")) {
		switch p {
		case "gets":
			wantGets = true
		case "https":
			wantHTTPS = true
		default:
			panic(paramError{"parts", r.Str("parts"), "some of: gets https"})
		}
	}
	if !wantGets && !wantHTTPS {
		panic(paramError{"parts", r.Str("parts"), "some of: gets https"})
	}
	switch {
	case small < 1:
		panic(paramError{"small", r.Str("small"), "at least 1 byte"})
	case size < 1:
		panic(paramError{"size", r.Str("size"), "at least 1 byte"})
	case dur < time.Second || dur%time.Second != 0:
		panic(paramError{"duration", r.Str("duration"), "whole seconds, at least 1s (wrk -d)"})
	case threads < 1:
		panic(paramError{"threads", r.Str("threads"), "at least 1"})
	case conns < threads:
		panic(paramError{"conns", r.Str("conns"), "at least the number of threads (wrk)"})
	case rounds < 1:
		panic(paramError{"rounds", r.Str("rounds"), "at least 1"})
	case passes < 1:
		panic(paramError{"passes", r.Str("passes"), "at least 1"})
	case alg != "RS256" && alg != "ES256":
		panic(paramError{"alg", r.Str("alg"), "RS256 or ES256"})
	}
	haveWrk, haveCurl := wantGets && r.Have("wrk"), wantHTTPS && r.Have("curl")
	if wantGets && !haveWrk {
		r.Note("wrk: not installed (apt-get install wrk), the small GETs are skipped")
	}
	if wantHTTPS && !haveCurl {
		r.Note("curl: not installed (apt-get install curl), the whole-file reads are skipped")
	}
	if !haveWrk && !haveCurl {
		return nil
	}

	e := &authEnv{small: small, big: size, smallPath: "/small.bin", bigPath: "/big.bin"}
	if haveWrk {
		e.steps += r.Reps() * rounds * 4
	}
	if haveCurl {
		e.steps += r.Reps() * 5 // fixed once the targets are known
	}
	data := filepath.Join(r.Dir(), "data")
	if err := ioRandomFile(filepath.Join(data, "small.bin"), small); err != nil {
		return err
	}
	if haveCurl {
		r.Log().Info("generating the file", "size", size)
		if err := ioRandomFile(filepath.Join(data, "big.bin"), size); err != nil {
			return err
		}
	}
	sec := filepath.Join(r.Dir(), "sec")
	if err := os.MkdirAll(sec, 0o755); err != nil {
		return err
	}
	const iss, aud = "https://issuer.bench.invalid", "https://wanda.bench.invalid"
	jwksFile := filepath.Join(sec, "issuer.jwks")
	var err error
	if e.good, e.refused, err = authTokens(alg, iss, aud, jwksFile); err != nil {
		return err
	}
	certFile, keyFile, err := benchCert(sec)
	if err != nil {
		return err
	}
	e.cert = certFile
	policy := []string{"--token-issuer", iss, "--token-keys", iss + "=" + jwksFile, "--token-audience", aud}
	base := []string{"server", "--export", "/data=" + data, "--listen", "127.0.0.1:0", "--log-format", "json"}
	if e.plain, err = r.startChild(ctx, "wanda-http", "serving", slices.Concat(base, policy)...); err != nil {
		return err
	}
	if haveCurl {
		if e.tls, err = r.startChild(ctx, "wanda-https", "serving", slices.Concat(base, policy, []string{"--tls-cert", certFile, "--tls-key", keyFile})...); err != nil {
			return err
		}
	}
	r.Note("wanda: `%s server` child processes (JSON log at info level to the scratch directory, its access log included, as deployed; Go's default GOMAXPROCS) trusting one issuer through an offline JWKS file (`--token-keys`, no discovery), %s key, audience %s, anonymous reads allowed (the default rule); one over plain HTTP (the small GETs and the ceiling), one over HTTPS (`--tls-cert`, a self-signed ECDSA P-256 certificate made by the run)", r.Wanda(), alg, aud)
	r.Note("tokens: WLCG profile (wlcg.ver 1.0, sub, aud, iat, nbf, exp, jti, scope storage.read:/), %d bytes (an `Authorization: Bearer` header of %d bytes); the refused one is the same issuer's token expired an hour ago (401 token expired)", len(e.good), len(e.good)+len("Authorization: Bearer \r\n"))
	if err := authCheckSmall(ctx, e); err != nil {
		return err
	}

	if haveWrk {
		if err := authSmallGETs(ctx, r, e, dur, threads, conns, rounds); err != nil {
			return err
		}
	}
	if haveCurl {
		if err := authStartXrdHttp(ctx, r, e, data, certFile, keyFile); err != nil {
			return err
		}
		if err := authWholeFile(ctx, r, e, passes, httpsToken); err != nil {
			return err
		}
	}
	r.Summary(authSummary(r, e, threads, conns, dur))
	r.Plot(PlotSpec{Name: "auth-gets", Title: fmt.Sprintf("%s GETs, wrk -t%d -c%d, in time order", client.FormatBytes(small), threads, conns),
		X: "round", Y: "req_s", Group: []string{"target"}, XLabel: "round", YLabel: "requests/s",
		Where: func(row Row) bool { return row.Get("test") == "small GETs" }})
	r.Plot(PlotSpec{Name: "auth-https", Title: fmt.Sprintf("%s page-cached file read whole with curl", client.FormatBytes(size)),
		X: "rep", Y: "mb_s", Group: []string{"target"}, XLabel: "repetition", YLabel: "MB/s",
		Where: func(row Row) bool { return row.Get("test") == "whole file" }})
	r.SeedTable(seed000Auth)
	return nil
}

// authTokens makes the issuer's key, writes its JWKS to jwksFile, and
// signs a valid token and an expired one.
func authTokens(alg, iss, aud, jwksFile string) (good, expired string, err error) {
	k, err := token.GenerateKey(alg, "bench-"+strings.ToLower(alg))
	if err != nil {
		return "", "", err
	}
	jwks, err := token.JWKS(k)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(jwksFile, jwks, 0o644); err != nil {
		return "", "", err
	}
	now := time.Now()
	claims := func(at time.Time) map[string]any {
		return map[string]any{"iss": iss, "sub": "bench", "aud": aud, "wlcg.ver": "1.0", "scope": "storage.read:/",
			"iat": at.Unix(), "nbf": at.Add(-time.Minute).Unix(), "exp": at.Add(6 * time.Hour).Unix(),
			"jti": "bench-" + at.Format(time.RFC3339Nano)}
	}
	if good, err = k.Sign(claims(now)); err != nil {
		return "", "", err
	}
	expired, err = k.Sign(claims(now.Add(-7 * time.Hour)))
	return good, expired, err
}

// authCheckSmall asks the plain server for the small file once per
// target before anything is timed: the whole file anonymously and with
// the token, a 401 naming the expiry with the refused token.
func authCheckSmall(ctx context.Context, e *authEnv) error {
	url := e.plain.URL + "/data" + e.smallPath
	for _, c := range []struct {
		target, tok string
		status      int
	}{{authAnon, "", http.StatusOK}, {authToken, e.good, http.StatusOK}, {authRefused, e.refused, http.StatusUnauthorized}} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if c.tok != "" {
			req.Header.Set("Authorization", "Bearer "+c.tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("check %s: %w", c.target, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("check %s: %w", c.target, err)
		}
		switch {
		case resp.StatusCode != c.status:
			return fmt.Errorf("check %s: GET %s answered %s, want %d", c.target, url, resp.Status, c.status)
		case c.status == http.StatusOK && n != e.small:
			return fmt.Errorf("check %s: GET %s gave %d bytes, want %d: %w", c.target, url, n, e.small, errWrongCopy)
		case c.status == http.StatusUnauthorized && !strings.Contains(resp.Header.Get("WWW-Authenticate"), "token expired"):
			return fmt.Errorf("check %s: WWW-Authenticate %q does not say the token expired", c.target, resp.Header.Get("WWW-Authenticate"))
		}
	}
	return nil
}

// authSmallGETs runs wrk against the plain server: rounds × reps rounds
// of anonymous, token and refused token, the order reversed every round.
func authSmallGETs(ctx context.Context, r *Run, e *authEnv, dur time.Duration, threads, conns, rounds int) error {
	url := e.plain.URL + "/data" + e.smallPath
	hdr := map[string]string{
		authAnon:    "",
		authPadded:  "X-Padding: " + strings.Repeat("p", len("Authorization: Bearer ")+len(e.good)-len("X-Padding: ")),
		authToken:   "Authorization: Bearer " + e.good,
		authRefused: "Authorization: Bearer " + e.refused,
	}
	order := []string{authAnon, authPadded, authToken, authRefused}
	// Warm-up, not recorded: connections, the server's heap, the token
	// and refusal caches.
	for _, t := range order {
		if _, err := authWrk(ctx, e.plain, url, hdr[t], threads, conns, time.Second); err != nil {
			return fmt.Errorf("warm-up %s: %w", t, err)
		}
	}
	r.Note("small GETs: `wrk -t%d -c%d -d%ds` (%s) on the same cores as the server, against %s (%s); a 1 s warm-up per target first; every target runs once per round, the order reversed every other round; the server's CPU per request is its utime+stime (/proc) over the run divided by the requests wrk made, wrk's likewise from its rusage",
		threads, conns, int(dur.Seconds()), orDefault(r.toolVersionSeen("wrk"), "version unknown"), url, client.FormatBytes(e.small))
	n := r.Reps() * rounds
	for i := 1; i <= n; i++ {
		rep := (i-1)/rounds + 1
		ord := slices.Clone(order)
		if i%2 == 0 {
			slices.Reverse(ord)
		}
		res := map[string]wrkResult{}
		for _, t := range ord {
			e.next(r, fmt.Sprintf("wrk %s round=%d", t, i))
			if err := context.Cause(ctx); err != nil {
				return err
			}
			w, err := authWrk(ctx, e.plain, url, hdr[t], threads, conns, dur)
			if err != nil {
				return fmt.Errorf("wrk %s: %w", t, err)
			}
			if t == authRefused && w.non2xx != w.requests {
				return fmt.Errorf("wrk %s: %d of %d answers were not errors: the token was accepted", t, w.requests-w.non2xx, w.requests)
			}
			if t != authRefused && w.non2xx != 0 {
				return fmt.Errorf("wrk %s: %d of %d answers were errors", t, w.non2xx, w.requests)
			}
			res[t] = w
		}
		for _, t := range order {
			w := res[t]
			kv := []any{"test", "small GETs", "target", t, "rep", rep, "round", i, "req_s", netRound(w.rps, 1),
				"requests", w.requests, "non2xx", w.non2xx, "socket_errors", w.sockErrs,
				"lat_avg_ms", netRound(w.latAvg.Seconds()*1e3, 3),
				"srv_cpu_us_per_req", netRound(w.srvCPU.Seconds()*1e6/float64(w.requests), 2),
				"wrk_cpu_us_per_req", netRound(w.wrkCPU.Seconds()*1e6/float64(w.requests), 2)}
			if t != authAnon {
				kv = append(kv, "vs_anonymous", netRound(w.rps/res[authAnon].rps, 4))
			}
			if t == authToken {
				kv = append(kv, "vs_padded", netRound(w.rps/res[authPadded].rps, 4))
			}
			r.Row(kv...)
		}
	}
	return nil
}

// wrkResult is one wrk run.
type wrkResult struct {
	rps              float64
	requests, non2xx int64
	sockErrs         int64
	latAvg           time.Duration
	srvCPU, wrkCPU   time.Duration
}

var (
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkRequests = regexp.MustCompile(`(\d+) requests in `)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSockErrs = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkLatency  = regexp.MustCompile(`Latency\s+([0-9.]+)(us|ms|s|m)\b`)
)

// authWrk runs wrk against url (with one more header line unless hdr is
// "") and measures the server's CPU time over the run.
func authWrk(ctx context.Context, srv *childProc, url, hdr string, threads, conns int, d time.Duration) (wrkResult, error) {
	var w wrkResult
	args := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(int(d.Seconds())) + "s"}
	if hdr != "" {
		args = append(args, "-H", hdr)
	}
	before, err := srv.usage()
	if err != nil {
		return w, err
	}
	cctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	cmd := netCommand(cctx, "wrk", append(args, url)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return w, fmt.Errorf("wrk: %w: %s", err, strings.TrimSpace(string(out)))
	}
	after, err := srv.usage()
	if err != nil {
		return w, err
	}
	w.srvCPU = after.CPU - before.CPU
	w.wrkCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	m := wrkRPS.FindSubmatch(out)
	n := wrkRequests.FindSubmatch(out)
	if m == nil || n == nil {
		return w, fmt.Errorf("wrk: no Requests/sec in its output: %s", strings.TrimSpace(string(out)))
	}
	w.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	w.requests, _ = strconv.ParseInt(string(n[1]), 10, 64)
	if w.requests == 0 {
		return w, fmt.Errorf("wrk made no request: %s", strings.TrimSpace(string(out)))
	}
	if m := wrkNon2xx.FindSubmatch(out); m != nil {
		w.non2xx, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if m := wrkSockErrs.FindSubmatch(out); m != nil {
		for _, s := range m[1:] {
			v, _ := strconv.ParseInt(string(s), 10, 64)
			w.sockErrs += v
		}
	}
	if m := wrkLatency.FindSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute}[string(m[2])]
		w.latAvg = time.Duration(v * float64(unit))
	}
	return w, nil
}

// authStartXrdHttp starts XRootD with XrdHttp and TLS on the data
// directory and fills e's XrdHttp URLs; a peer that is not installed is a
// note.
func authStartXrdHttp(ctx context.Context, r *Run, e *authEnv, data, cert, key string) error {
	if !r.Have("xrootd") {
		r.Note("xrootd: not installed (apt-get install xrootd-server xrootd-server-plugins), XrdHttp skipped: only wanda's figures are reported")
		return nil
	}
	s, err := xrdpeer.Start(ctx, xrdpeer.Options{Dir: data, HTTP: true, TLSCert: cert, TLSKey: key, Checksum: "none",
		Work: filepath.Join(r.Dir(), "xrootd-"+strconv.Itoa(peerSeq())), Log: r.Log()})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		r.Note("XrdHttp: %v, skipped: only wanda's figures are reported", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("XrdHttp: %w", err)
	}
	r.Cleanup(func() { s.Close() })
	e.xrdH = s.HTTP
	e.xrdHTTPS = "https://" + strings.TrimPrefix(s.HTTP, "http://")
	r.Note("XrdHttp: XRootD's own xrootd (package xrdpeer: `xrd.protocol XrdHttp`, `xrd.tls` with the same certificate, `xrd.tlsca noverify`, otherwise its defaults) on the same directory, HTTPS and plain HTTP on its XrdHttp port")
	return nil
}

// authWholeFile reads the big file with curl from every target, in turns.
func authWholeFile(ctx context.Context, r *Run, e *authEnv, passes int, withToken bool) error {
	urls := map[string]string{
		authWandaTLS:  e.tls.URL + "/data" + e.bigPath,
		authWandaHTTP: e.plain.URL + "/data" + e.bigPath,
	}
	targets := []string{authWandaTLS}
	if withToken {
		urls[authWandaTLSTk] = urls[authWandaTLS]
		targets = append(targets, authWandaTLSTk)
	}
	targets = append(targets, authWandaHTTP)
	if e.xrdHTTPS != "" {
		urls[authXrdTLS], urls[authXrdHTTP] = e.xrdHTTPS+e.bigPath, e.xrdH+e.bigPath
		targets = append([]string{authXrdTLS}, append(targets, authXrdHTTP)...)
	}
	args := map[string][]string{authWandaTLSTk: {"-H", "Authorization: Bearer " + e.good}}
	// One checked read per target before the timing (it also warms the
	// page cache and the servers), which says what curl negotiated.
	ciphers := map[string]string{}
	for _, t := range slices.Clone(targets) {
		info, err := curlWhole(ctx, urls[t], args[t], e.cert, e.big, 1, true)
		if err != nil && t == authXrdHTTP {
			r.Note("XrdHttp http: %v; its line is skipped", err)
			targets = slices.DeleteFunc(targets, func(s string) bool { return s == t })
			continue
		}
		if err != nil {
			return fmt.Errorf("check %s: %w", t, err)
		}
		ciphers[t] = info.cipher
		r.Note("curl %s: %s", t, info.negotiated)
	}
	if x, w := ciphers[authXrdTLS], ciphers[authWandaTLS]; x != "" && x != w {
		if name, ok := strings.CutPrefix(x, "TLSv1.3 / "); ok {
			urls[authWandaTLSX], args[authWandaTLSX] = urls[authWandaTLS], []string{"--tls13-ciphers", name}
			if _, err := curlWhole(ctx, urls[authWandaTLSX], args[authWandaTLSX], e.cert, e.big, 1, false); err != nil {
				return fmt.Errorf("check %s: %w", authWandaTLSX, err)
			}
			targets = slices.Insert(targets, slices.Index(targets, authWandaTLS)+1, authWandaTLSX)
			r.Note("curl %s: `--tls13-ciphers %s`, the cipher XrdHttp's OpenSSL chose, where wanda's Go TLS chose %s", authWandaTLSX, name, strings.TrimPrefix(w, "TLSv1.3 / "))
		} else {
			r.Note("XrdHttp negotiated %s, wanda %s: no TLS 1.3 cipher to ask both for, the same-cipher line is skipped", x, w)
		}
	}
	r.Note("whole file: %s of random bytes in the page cache; `curl -sS --cacert CERT -o /dev/null` (%s), one stream, a new process and connection per read, %d reads back to back per measurement (status and size checked, seconds is their total); the targets take turns, the order reversed every other repetition",
		client.FormatBytes(e.big), orDefault(r.toolVersionSeen("curl"), "version unknown"), passes)
	e.steps += r.Reps()*len(targets) - r.Reps()*5
	for rep := 1; rep <= r.Reps(); rep++ {
		ord := slices.Clone(targets)
		if rep%2 == 0 {
			slices.Reverse(ord)
		}
		mbs, secs := map[string]float64{}, map[string]float64{}
		for _, t := range ord {
			e.next(r, fmt.Sprintf("curl %s rep=%d", t, rep))
			if err := context.Cause(ctx); err != nil {
				return err
			}
			info, err := curlWhole(ctx, urls[t], args[t], e.cert, e.big, passes, false)
			if err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
			secs[t], mbs[t] = info.seconds, float64(passes)*float64(e.big)/1e6/info.seconds
		}
		for _, t := range targets {
			kv := []any{"test", "whole file", "target", t, "rep", rep, "mb_s", netRound(mbs[t], 1), "seconds", netRound(secs[t], 3)}
			if x, ok := mbs[authXrdTLS]; ok && t != authXrdTLS {
				kv = append(kv, "vs_xrdhttp_tls", netRound(mbs[t]/x, 4))
			}
			r.Row(kv...)
		}
	}
	return nil
}

// curlInfo is what curlWhole measured.
type curlInfo struct {
	seconds    float64
	negotiated string // protocol and TLS cipher (verbose reads only)
	cipher     string // "TLSv1.3 / TLS_AES_256_GCM_SHA384"; "" without TLS
}

var curlTLS = regexp.MustCompile(`SSL connection using ([^\r\n]+)`)

// curlWhole reads url passes times with curl (and its extra arguments) to
// /dev/null, checking the status and the size of every read; verbose also
// says what was negotiated.
func curlWhole(ctx context.Context, url string, extra []string, cacert string, size int64, passes int, verbose bool) (curlInfo, error) {
	var info curlInfo
	cctx, cancel := context.WithTimeout(ctx, xrdCopyBound(size, passes))
	defer cancel()
	start := time.Now()
	for range passes {
		args := []string{"-sS", "--noproxy", "*", "--cacert", cacert, "-o", "/dev/null", "-w", "%{http_code} %{size_download} %{http_version}\n"}
		if verbose {
			args = append(args, "-v")
		}
		cmd := netCommand(cctx, "curl", slices.Concat(args, extra, []string{url})...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			msg := strings.TrimSpace(stderr.String())
			if len(msg) > 400 {
				msg = "..." + msg[len(msg)-400:]
			}
			return info, fmt.Errorf("curl %s: %w: %s", url, err, msg)
		}
		f := strings.Fields(string(out))
		if len(f) != 3 || f[0] != "200" || f[1] != strconv.FormatInt(size, 10) {
			return info, fmt.Errorf("curl %s: status, bytes, HTTP version %q, want 200 and %d bytes: %w", url, strings.TrimSpace(string(out)), size, errWrongCopy)
		}
		info.negotiated = "HTTP/" + f[2]
		if m := curlTLS.FindStringSubmatch(stderr.String()); m != nil {
			info.cipher = strings.TrimSpace(m[1])
			info.negotiated += ", " + info.cipher
		} else if verbose {
			info.negotiated += ", no TLS"
		}
	}
	info.seconds = time.Since(start).Seconds()
	return info, nil
}

// authSummary is the table of medians and ratios with their goals.
func authSummary(r *Run, e *authEnv, threads, conns int, dur time.Duration) string {
	rows := r.Rows()
	col := func(test, target, c string) []float64 {
		var out []float64
		for _, row := range rows {
			if row.Get("test") == test && row.Get("target") == target {
				if v, ok := toFloat(row.Get(c)); ok {
					out = append(out, v)
				}
			}
		}
		return out
	}
	med := func(xs []float64) string {
		if len(xs) == 0 {
			return ""
		}
		return fmtNum(netRound(percentile(xs, 0.5), 2))
	}
	var b strings.Builder
	b.WriteString("Medians over the rounds (GETs) and repetitions (whole file); a ratio is the median of the ratios between targets measured one after the other (same round or repetition).\n\n")
	b.WriteString("| measure | target | median | server CPU per request | wrk CPU per request | ratio | goal | met |\n|---|---|---:|---:|---:|---:|---|---|\n")
	goalLine := func(ratios []float64, goal float64, info string) (string, string, string) {
		if len(ratios) == 0 {
			return "", "", ""
		}
		m := percentile(ratios, 0.5)
		if info != "" {
			return fmt.Sprintf("%.3f", m), info, ""
		}
		met := "yes"
		if m < goal {
			met = "**no**"
		}
		return fmt.Sprintf("%.3f", m), fmt.Sprintf(">= %.2f", goal), met
	}
	measure := fmt.Sprintf("%s GETs (wrk -t%d -c%d -d%ds)", client.FormatBytes(e.small), threads, conns, int(dur.Seconds()))
	for _, t := range []string{authAnon, authPadded, authToken, authRefused} {
		rps := col("small GETs", t, "req_s")
		if len(rps) == 0 {
			continue
		}
		ratio, goal, met := goalLine(col("small GETs", t, "vs_anonymous"), 0.97, map[string]string{authPadded: "(information)", authRefused: "(information)"}[t])
		cpu, wcpu := med(col("small GETs", t, "srv_cpu_us_per_req")), med(col("small GETs", t, "wrk_cpu_us_per_req"))
		fmt.Fprintf(&b, "| %s | %s | %s req/s | %s µs | %s µs | %s | %s | %s |\n", measure, t, med(rps), cpu, wcpu, ratio, goal, met)
		measure = ""
	}
	measure = fmt.Sprintf("whole %s file (curl, one stream)", client.FormatBytes(e.big))
	for _, t := range []string{authXrdTLS, authWandaTLS, authWandaTLSX, authWandaTLSTk, authWandaHTTP, authXrdHTTP} {
		mbs := col("whole file", t, "mb_s")
		if len(mbs) == 0 {
			continue
		}
		info := map[string]string{authWandaHTTP: "(ceiling without TLS)", authXrdHTTP: "(information)"}[t]
		ratio, goal, met := goalLine(col("whole file", t, "vs_xrdhttp_tls"), 1.0, info)
		fmt.Fprintf(&b, "| %s | %s | %s MB/s | | | %s | %s | %s |\n", measure, t, med(mbs), ratio, goal, met)
		measure = ""
	}
	if rs := col("small GETs", authToken, "vs_anonymous"); len(rs) > 0 {
		r.Note("goal: token/anonymous >= 0.97 on %s GETs (median of %d rounds): %.3f; of which the header's bytes (anonymous with a header of the token's size / anonymous) %.3f and the token's verification (token / that) %.3f",
			client.FormatBytes(e.small), len(rs), percentile(rs, 0.5),
			percentile(col("small GETs", authPadded, "vs_anonymous"), 0.5), percentile(col("small GETs", authToken, "vs_padded"), 0.5))
	}
	if rs := col("whole file", authWandaTLS, "vs_xrdhttp_tls"); len(rs) > 0 {
		r.Note("goal: wanda/XrdHttp over TLS >= 1.0 (median of %d repetitions): %.3f", len(rs), percentile(rs, 0.5))
	}
	return b.String()
}

// benchCert writes a self-signed ECDSA P-256 certificate for 127.0.0.1
// and localhost.
func benchCert(dir string) (certFile, keyFile string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", err
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
}

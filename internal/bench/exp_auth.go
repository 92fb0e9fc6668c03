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
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth/token"
	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// The auth experiment: what authentication costs, in one run.
//
//   - small reads: wrk against one wanda server (a child process)
//     configured with a token issuer, 4 KiB GETs anonymous and with a
//     valid bearer token (and, for information, with a refused one);
//     goal token/anonymous >= 0.97;
//   - HTTPS: one page-cached file read with curl over TLS from a wanda
//     server and from XRootD's XrdHttp (TLS, the same directory); goal
//     wanda/XrdHttp >= 1.0, plain-HTTP wanda beside them as the ceiling.
//
// The targets alternate in every repetition; medians are reported.

func init() {
	Register(&Experiment{
		Name:  "auth",
		Seed:  "000",
		Title: "Authentication cost: 4 KiB GETs with and without a bearer token (wrk), HTTPS whole-file reads vs XrdHttp over TLS (curl)",
		Doc: "A wanda server (`wanda server` as a child process, JSON log at info level as deployed) trusting one token issuer " +
			"through an offline JWKS file serves a 4 KiB file to wrk (`threads` threads, `conns` connections, `duration` each) " +
			"anonymously, with a valid WLCG token (storage.read:/) in every request's Authorization header, and with an expired " +
			"token (401); requests/s and the ratio token/anonymous (goal >= 0.97: less than 3% fewer requests/s). Then one " +
			"page-cached file is read whole with curl (one stream, to /dev/null) over HTTPS from a wanda server with the same " +
			"policy (anonymous and with the token) and from XRootD's XrdHttp with TLS on the same directory, and over plain " +
			"HTTP from wanda (the ceiling without TLS); MB/s and the ratio wanda/XrdHttp over TLS (goal >= 1.0). Targets " +
			"alternate in every repetition.",
		Params: []Param{
			{Name: "size", Help: "size of the file read whole over HTTPS", Default: "1GiB", Quick: "256MiB"},
			{Name: "small", Help: "size of the file of the small GETs", Default: "4KiB"},
			{Name: "duration", Help: "wrk duration per measurement", Default: "10s", Quick: "3s"},
			{Name: "conns", Help: "wrk connections", Default: "16"},
			{Name: "threads", Help: "wrk threads", Default: "2"},
			{Name: "passes", Help: "curl reads of the big file per measurement, back to back", Default: "3", Quick: "2"},
		},
		Run: runAuthExp,
	})
}

const seed000Auth = `The seeds measured no authentication cost: their federations ran with GSI/X.509 (CMS AAA, seed 000) or without authorization on test paths. The reference here is the machine itself: anonymous reads from the same server, and XRootD's XrdHttp over TLS on the same file.`

func runAuthExp(ctx context.Context, r *Run) error {
	size, small := r.Size("size"), r.Size("small")
	dur, passes := r.Duration("duration"), r.Int("passes")
	conns, threads := r.Int("conns"), r.Int("threads")
	if size <= 0 || small <= 0 || dur <= 0 || passes <= 0 || conns <= 0 || threads <= 0 {
		return usagef("size, small, duration, passes, conns and threads must be positive")
	}
	if !r.Have("wrk") || !r.Have("curl") {
		return errors.New("auth: needs wrk and curl (apt-get install wrk curl)")
	}
	data := filepath.Join(r.Dir(), "data")
	if err := ioRandomFile(filepath.Join(data, "big.bin"), size); err != nil {
		return err
	}
	if err := ioRandomFile(filepath.Join(data, "small.bin"), small); err != nil {
		return err
	}
	sec := filepath.Join(r.Dir(), "sec")
	if err := os.MkdirAll(sec, 0o755); err != nil {
		return err
	}
	const iss, aud = "https://issuer.bench.invalid", "https://wanda.bench"
	k, err := token.GenerateKey("ES256", "bench")
	if err != nil {
		return err
	}
	jwks, err := token.JWKS(k)
	if err != nil {
		return err
	}
	jwksFile := filepath.Join(sec, "issuer.jwks")
	if err := os.WriteFile(jwksFile, jwks, 0o644); err != nil {
		return err
	}
	now := time.Now()
	claims := map[string]any{"iss": iss, "sub": "bench", "aud": aud, "wlcg.ver": "1.0", "scope": "storage.read:/",
		"iat": now.Unix(), "exp": now.Add(6 * time.Hour).Unix()}
	good, err := k.Sign(claims)
	if err != nil {
		return err
	}
	claims["exp"] = now.Add(-time.Hour).Unix()
	expired, err := k.Sign(claims)
	if err != nil {
		return err
	}
	cert, key, err := benchCert(sec)
	if err != nil {
		return err
	}
	policy := []string{"--token-issuer", iss, "--token-keys", iss + "=" + jwksFile, "--token-audience", aud}
	plain, err := r.startChild(ctx, "wanda-plain", "serving", append([]string{"server", "--export", "/data=" + data,
		"--listen", "127.0.0.1:0", "--log-format", "json"}, policy...)...)
	if err != nil {
		return err
	}
	tlsSrv, err := r.startChild(ctx, "wanda-tls", "serving", append([]string{"server", "--export", "/data=" + data,
		"--listen", "127.0.0.1:0", "--log-format", "json", "--tls-cert", cert, "--tls-key", key}, policy...)...)
	if err != nil {
		return err
	}
	r.Note("wanda servers: `%s server` child processes trusting one issuer through an offline JWKS file (ES256), anonymous reads allowed; one over HTTP, one over HTTPS (a self-signed ECDSA P-256 certificate)", r.Wanda())

	// Small GETs with wrk.
	smallURL := plain.URL + "/data/small.bin"
	hdr := map[string]string{"anonymous": "", "token": good, "expired token (401)": expired}
	order := []string{"anonymous", "token", "expired token (401)"}
	rps := map[string][]float64{}
	for rep := 1; rep <= r.Reps(); rep++ {
		if rep%2 == 0 {
			order[0], order[1] = order[1], order[0]
		}
		for _, w := range order {
			r.Step("wrk "+w, rep, r.Reps())
			v, err := wrkRate(ctx, smallURL, hdr[w], threads, conns, dur)
			if err != nil {
				return err
			}
			rps[w] = append(rps[w], v)
			r.Row("measure", "4 KiB GETs (wrk)", "target", "wanda "+w, "rep", rep, "value", netRound(v, 1), "unit", "req/s")
		}
	}

	// HTTPS whole-file reads.
	targets := []string{"wanda https", "wanda https + token", "wanda http"}
	urls := map[string]string{"wanda https": tlsSrv.URL + "/data/big.bin", "wanda https + token": tlsSrv.URL + "/data/big.bin", "wanda http": plain.URL + "/data/big.bin"}
	tokens := map[string]string{"wanda https + token": good}
	if r.Have("xrootd") {
		s, err := xrdpeer.Start(ctx, xrdpeer.Options{Dir: data, HTTP: true, TLSCert: cert, TLSKey: key,
			Work: filepath.Join(r.Dir(), "xrootd"), Log: r.Log()})
		switch {
		case errors.Is(err, xrdpeer.ErrNotInstalled):
			r.Note("XrdHttp: %v, skipped", err)
		case err != nil:
			return err
		default:
			r.Cleanup(func() { s.Close() })
			urls["XrdHttp https"] = strings.Replace(s.HTTP, "http://", "https://", 1) + "/big.bin"
			targets = append([]string{"XrdHttp https"}, targets...)
			r.Note("XrdHttp: XRootD's own server (xrdpeer: `xrd.tls` with the same certificate, XrdHttp on a second port, its defaults) on the same directory")
		}
	} else {
		r.Note("xrootd: not installed, XrdHttp skipped")
	}
	mbs := map[string][]float64{}
	for rep := 1; rep <= r.Reps(); rep++ {
		ts := append([]string(nil), targets...)
		if rep%2 == 0 {
			for i, j := 0, len(ts)-1; i < j; i, j = i+1, j-1 {
				ts[i], ts[j] = ts[j], ts[i]
			}
		}
		for _, t := range ts {
			r.Step("curl "+t, rep, r.Reps())
			v, err := curlRate(ctx, urls[t], tokens[t], size, passes)
			if err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
			mbs[t] = append(mbs[t], v)
			r.Row("measure", "whole file (curl)", "target", t, "rep", rep, "value", netRound(v, 1), "unit", "MB/s")
		}
	}

	med := func(xs []float64) float64 { return percentile(xs, 0.5) }
	var b strings.Builder
	b.WriteString("| measure | target | median | ratio | goal |\n|---|---|---|---|---|\n")
	a, tk := med(rps["anonymous"]), med(rps["token"])
	fmt.Fprintf(&b, "| 4 KiB GETs (wrk -t%d -c%d) | anonymous | %.0f req/s | | |\n", threads, conns, a)
	fmt.Fprintf(&b, "| | token | %.0f req/s | %.3f of anonymous | >= 0.97 %s |\n", tk, tk/a, metText(tk/a >= 0.97))
	fmt.Fprintf(&b, "| | expired token (401) | %.0f req/s | %.3f of anonymous | (information) |\n", med(rps["expired token (401)"]), med(rps["expired token (401)"])/a)
	x := med(mbs["XrdHttp https"])
	for _, t := range targets {
		v := med(mbs[t])
		ratio, goal := "", ""
		if x > 0 && t != "XrdHttp https" {
			ratio = fmt.Sprintf("%.3f of XrdHttp", v/x)
			if t != "wanda http" {
				goal = ">= 1.0 " + metText(v/x >= 1.0)
			}
		}
		fmt.Fprintf(&b, "| whole %s (curl) | %s | %.0f MB/s | %s | %s |\n", client.FormatBytes(size), t, v, ratio, goal)
	}
	r.Summary(b.String())
	r.Note("goal: token/anonymous >= 0.97 on 4 KiB GETs: %.3f; wanda/XrdHttp over TLS >= 1.0: %s", tk/a, ratioText(med(mbs["wanda https"]), x))
	r.SeedTable(seed000Auth)
	return nil
}

func metText(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(not met)"
}

func ratioText(v, ref float64) string {
	if ref <= 0 {
		return "no XrdHttp"
	}
	return fmt.Sprintf("%.3f", v/ref)
}

var wrkRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

// wrkRate runs wrk with an optional bearer token and returns requests/s.
func wrkRate(ctx context.Context, url, tok string, threads, conns int, d time.Duration) (float64, error) {
	args := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(int(d.Seconds())) + "s"}
	if tok != "" {
		args = append(args, "-H", "Authorization: Bearer "+tok)
	}
	out, err := netCommand(ctx, "wrk", append(args, url)...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("wrk: %w", err)
	}
	m := wrkRPS.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk: no Requests/sec in its output")
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// curlRate reads url passes times with curl (TLS unverified: the
// certificate is the run's own) and returns MB/s.
func curlRate(ctx context.Context, url, tok string, size int64, passes int) (float64, error) {
	start := time.Now()
	for range passes {
		args := []string{"-sSfk", "--noproxy", "*", "-o", "/dev/null"}
		if tok != "" {
			args = append(args, "-H", "Authorization: Bearer "+tok)
		}
		if err := netCmd(ctx, "curl", append(args, url)...); err != nil {
			return 0, err
		}
	}
	return float64(size) * float64(passes) / time.Since(start).Seconds() / 1e6, nil
}

// benchCert writes a self-signed ECDSA certificate for 127.0.0.1.
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

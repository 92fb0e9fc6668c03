package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/testproc"
	"github.com/wanda-fed/wanda/internal/testserver"
	"github.com/wanda-fed/wanda/internal/transfer/store/postgres/pgtest"
)

// dlgSite is a transfer service over https that takes X.509 users (a
// grid CA made by openssl), between two wanda storages over https that
// let the user's DN alone read and write: no token, no service
// credential reaches them.
type dlgSite struct {
	g                *gridPKI
	svc              *testproc.Process   // the first instance
	svcs             []*testproc.Process // every instance
	src, dst         *testserver.Server
	srcDir, dstDir   string
	records          string // the destination's access records
	proxy, capath    string
	hc               *http.Client // the user, with its proxy
	userCert, userKy string
}

const aliceDN = "/DC=org/DC=wanda-test/CN=Alice Analyst"

func startDlgSite(t *testing.T) *dlgSite {
	t.Helper()
	return startDlgSites(t, dlgOptions{}, "sqlite:"+filepath.Join(t.TempDir(), "t.db"))
}

// dlgOptions vary the site.
type dlgOptions struct {
	// VOMS: the user's proxy carries VOMS attributes of VO dteam
	// (voms-proxy-fake), which the service verifies (--x509-voms-dir).
	VOMS bool
	// Sealed: every instance seals the delegations' keys with one
	// --delegation-key.
	Sealed bool
}

// dteamFQANs are the attributes of the VOMS proxy, in its order.
var dteamFQANs = []string{"/dteam/Role=NULL/Capability=NULL", "/dteam/wanda/Role=NULL/Capability=NULL"}

// startDlgSites starts one instance of the service on each database
// (the same one for several instances on one PostgreSQL database).
func startDlgSites(t *testing.T, o dlgOptions, dbs ...string) *dlgSite {
	t.Helper()
	needFTSClients(t)
	openssl := requireTool(t, "openssl")
	s := &dlgSite{g: makeGridPKI(t), srcDir: t.TempDir(), dstDir: t.TempDir()}
	s.proxy = s.g.opensslProxy(t)
	s.userCert, s.userKy = s.g.userCert, s.g.userKey
	d := t.TempDir()
	srv, srvPEM, srvKey, capath := serverCertFiles(t, openssl, d)
	s.capath = capath
	s.records = filepath.Join(d, "dst-records.jsonl")
	storage := func(records string) func(c *config.Config) {
		return func(c *config.Config) {
			c.Server.TLS = config.TLS{Cert: srvPEM, Key: srvKey}
			c.Server.TPC.Allow = []string{"127.0.0.0/8"}
			c.Server.TPC.CA = srvPEM
			c.Auth.AnonymousRead = false
			c.Auth.X509 = config.X509{CADir: s.g.caDir}
			c.Auth.Rules = []config.AuthRule{{Prefix: "/", Read: []string{"dn:" + aliceDN}, Modify: []string{"dn:" + aliceDN}}}
			if records != "" {
				c.Records.File = records
			}
		}
	}
	s.src = testserver.StartWith(t, testserver.Options{Configure: storage("")}, config.Export{Prefix: "/store", Path: s.srcDir})
	s.dst = testserver.StartWith(t, testserver.Options{Configure: storage(s.records)}, config.Export{Prefix: "/store", Path: s.dstDir})
	var extra []string
	if o.VOMS {
		s.proxy, extra = s.g.vomsProxy(t), []string{"--x509-voms-dir", s.g.vomsDir}
	}
	if o.Sealed {
		key := filepath.Join(d, "delegation.key")
		if err := os.WriteFile(key, []byte(strings.Repeat("5a", 32)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		extra = append(extra, "--delegation-key", key)
	}
	for _, db := range dbs {
		s.svcs = append(s.svcs, startChild(t, append([]string{"transfer", "serve", "--listen", "127.0.0.1:0", "--db", db,
			"--log-format", "json", "--allow", "127.0.0.0/8", "--tls-cert", srvPEM, "--tls-key", srvKey, "--x509-ca-dir", s.g.caDir,
			"--ca", srvPEM}, extra...)...))
	}
	s.svc = s.svcs[0]
	pair, err := tls.LoadX509KeyPair(s.proxy, s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CertPEM)
	s.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	t.Cleanup(func() {
		for _, svc := range s.svcs {
			log := svc.Log()
			for _, secret := range []string{"PRIVATE KEY", "BEGIN CERTIFICATE"} {
				if strings.Contains(log, secret) {
					t.Errorf("the service logged a %s", secret)
				}
			}
		}
	})
	return s
}

// fts runs fts-rest-NAME with the user's proxy.
func (s *dlgSite) fts(t *testing.T, name string, args ...string) result {
	t.Helper()
	script := requireTool(t, "fts-rest-"+name)
	return runEnv(t, []string{"HOME=" + t.TempDir()}, "", ftsPython,
		append([]string{script, "-s", s.svc.URL, "--cert", s.proxy, "--key", s.proxy, "--capath", s.capath}, args...)...)
}

// call sends a request to the service as the user (hc) and returns the
// status and body.
func (s *dlgSite) call(t *testing.T, hc *http.Client, method, path string, body []byte) (int, string) {
	t.Helper()
	return s.callAt(t, s.svc, hc, method, path, body)
}

// callAt is call to one instance of the service.
func (s *dlgSite) callAt(t *testing.T, svc *testproc.Process, hc *http.Client, method, path string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, svc.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitJob polls the job until it ends and returns it.
func (s *dlgSite) waitJob(t *testing.T, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var j map[string]any
		code, b := s.call(t, s.hc, "GET", "/jobs/"+id+"?files=file_state,reason", nil)
		if err := json.Unmarshal([]byte(b), &j); code != 200 || err != nil {
			t.Fatalf("GET /jobs/%s: %d %s", id, code, b)
		}
		switch j["job_state"] {
		case "FINISHED", "FINISHEDDIRTY", "FAILED", "CANCELED":
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not ended: %v", id, j)
		}
		time.Sleep(100 * time.Millisecond) // polling the service
	}
}

// sawDN waits for the destination's access record of a write to name
// by the user's DN.
func (s *dlgSite) sawDN(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(s.records)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && strings.HasSuffix(str(m, "path"), name) && str(m, "user") == aliceDN && num(m, "bytes_written") > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the destination recorded no write of %s by %s:\n%s", name, aliceDN, b)
		}
		time.Sleep(50 * time.Millisecond) // polling the records file
	}
}

// FTS3's clients delegate the user's proxy (fts-rest-delegate,
// fts-rest-transfer-submit --cert/--key, fts3.rest.client.easy); the
// jobs move with it between two storages that take the user's DN alone,
// and the destination sees that DN. A submission without a delegation
// is refused with 419, as FTS3 does.
func TestFTSDelegation(t *testing.T) {
	s := startDlgSite(t)
	r := s.fts(t, "whoami", "-j")
	var who map[string]any
	if err := json.Unmarshal(r.Stdout, &who); r.Err != nil || err != nil {
		t.Fatalf("fts-rest-whoami: %v %v\n%s%s", r.Err, err, r.Stdout, r.Stderr)
	}
	dlg := aliceDelegationID()
	if who["delegation_id"] != dlg || who["user_dn"] != aliceDN {
		t.Fatalf("whoami: %v, want delegation_id %s", who, dlg)
	}
	if code, b := s.call(t, s.hc, "GET", "/delegation/"+dlg, nil); code != 200 || strings.TrimSpace(b) != "null" {
		t.Fatalf("GET /delegation/%s before any: %d %s", dlg, code, b)
	}
	data := randomBytes(200000, 27)
	if err := os.WriteFile(filepath.Join(s.srcDir, "a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"files": [{"sources": ["` + s.src.URL + `/store/a"], "destinations": ["` + s.dst.URL + `/store/direct"]}]}`)
	if code, b := s.call(t, s.hc, "POST", "/jobs", body); code != 419 || !strings.Contains(b, "No delegation found") {
		t.Fatalf("a submission without a delegation: %d %s", code, b)
	}

	// The command line delegates, then submits.
	r = s.fts(t, "transfer-submit", "davs://"+strings.TrimPrefix(s.src.URL, "https://")+"/store/a", s.dst.URL+"/store/cli")
	m := jobIDLine.FindSubmatch(append(r.Stdout, r.Stderr...))
	if r.Err != nil || m == nil {
		t.Fatalf("fts-rest-transfer-submit --cert: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	if j := s.waitJob(t, string(m[1])); j["job_state"] != "FINISHED" || j["user_dn"] != aliceDN {
		t.Fatalf("the command line's job: %v", j)
	}
	sameBytes(t, "cli", readFile(t, filepath.Join(s.dstDir, "cli")), data)
	s.sawDN(t, "/store/cli")
	var info map[string]any
	if code, b := s.call(t, s.hc, "GET", "/delegation/"+dlg, nil); code != 200 || json.Unmarshal([]byte(b), &info) != nil {
		t.Fatalf("GET /delegation/%s: %d %s", dlg, code, b)
	}
	end, err := time.Parse("2006-01-02T15:04:05", info["termination_time"].(string))
	// The command signs a proxy of 7 hours (its --proxy-lifetime), or
	// (FTS-1217) to the end of the earliest certificate of the user's
	// chain when one ends before the first: the user certificate, made a
	// second before the proxy, sometimes does.
	if err != nil || time.Until(end) < 6*time.Hour || time.Until(end) > 25*time.Hour {
		t.Fatalf("termination_time %v (%v), want in 7 hours or in a day", info["termination_time"], err)
	}

	// fts-rest-delegate, forced: a new proxy.
	if r = s.fts(t, "delegate", "-f"); r.Err != nil || !bytes.Contains(append(r.Stdout, r.Stderr...), []byte(dlg)) {
		t.Fatalf("fts-rest-delegate -f: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}

	// The Python bindings, as an experiment's program uses them.
	prog := `import json, os, time
import fts3.rest.client.easy as fts3
ctx = fts3.Context(os.environ["ENDPOINT"], ucert=os.environ["PROXY"], ukey=os.environ["PROXY"], capath=os.environ["CAPATH"])
dlg = fts3.delegate(ctx, force=True)
job = fts3.new_job([fts3.new_transfer(os.environ["SRC"], os.environ["DST"])], retry=0)
jid = fts3.submit(ctx, job)
for _ in range(600):
	st = fts3.get_job_status(ctx, jid)
	if st["job_state"] in ("FINISHED", "FINISHEDDIRTY", "FAILED", "CANCELED"):
		break
	time.sleep(0.1)
print(json.dumps({"dlg": dlg, "state": st["job_state"], "reason": st["reason"]}))
`
	r = runEnv(t, []string{"ENDPOINT=" + s.svc.URL, "PROXY=" + s.proxy, "CAPATH=" + s.capath, "SRC=" + s.src.URL + "/store/a",
		"DST=" + s.dst.URL + "/store/easy", "HOME=" + t.TempDir()}, "", ftsPython, "-c", prog)
	var out map[string]any
	if err := json.Unmarshal(r.Stdout, &out); r.Err != nil || err != nil || out["dlg"] != dlg || out["state"] != "FINISHED" {
		t.Fatalf("the bindings: %v %v %v\n%s%s", r.Err, err, out, r.Stdout, r.Stderr)
	}
	sameBytes(t, "easy", readFile(t, filepath.Join(s.dstDir, "easy")), data)
	s.sawDN(t, "/store/easy")

	// VOMS attributes from the service: FTS3's 424, with what to do.
	if code, b := s.call(t, s.hc, "POST", "/delegation/"+dlg+"/voms", []byte(`["dteam"]`)); code != http.StatusFailedDependency || !strings.Contains(b, "voms-proxy-init") {
		t.Errorf("POST voms: %d %s", code, b)
	}
	// Removed: a submission is refused again.
	if code, b := s.call(t, s.hc, "DELETE", "/delegation/"+dlg, nil); code != http.StatusNoContent {
		t.Fatalf("DELETE /delegation/%s: %d %s", dlg, code, b)
	}
	if code, _ := s.call(t, s.hc, "DELETE", "/delegation/"+dlg, nil); code != http.StatusNotFound {
		t.Errorf("DELETE again: %d", code)
	}
	if code, b := s.call(t, s.hc, "POST", "/jobs", body); code != 419 {
		t.Errorf("a submission after the delegation was removed: %d %s", code, b)
	}
}

// Hostile delegations: each refused with a 4xx that says why, and
// nothing stored (GET /delegation/ID stays null).
func TestFTSDelegationHostile(t *testing.T) {
	s := startDlgSite(t)
	dlg := aliceDelegationID()
	alice, aliceCert := s.alice(t)
	mallory := s.g.otherUser(t, "Mallory")
	malloryCert, _ := x509.ParseCertificate(mallory.Certificate[0])

	// Nothing pending yet.
	if code, b := s.call(t, s.hc, "PUT", "/delegation/"+dlg+"/credential", []byte("x")); code != 400 || !strings.Contains(b, "No credential cache") {
		t.Errorf("a proxy with no request pending: %d %s", code, b)
	}
	code, reqPEM := s.call(t, s.hc, "GET", "/delegation/"+dlg+"/request", nil)
	if code != 200 {
		t.Fatalf("GET request: %d %s", code, reqPEM)
	}
	if c, again := s.call(t, s.hc, "GET", "/delegation/"+dlg+"/request", nil); c != 200 || again != reqPEM {
		t.Errorf("the request pending is not given again: %d", c)
	}
	blk, _ := pem.Decode([]byte(reqPEM))
	if blk == nil {
		t.Fatalf("the request is not PEM: %q", reqPEM)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil || csr.CheckSignature() != nil {
		t.Fatalf("the request: %v", err)
	}
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cases := []struct {
		name string
		path string
		body []byte
		code int
		want string
	}{
		{"garbage", "credential", []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 400, "Could not process the proxy"},
		{"not PEM", "credential", []byte("hello"), 400, "not PEM"},
		{"a key in the body", "credential", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), 400, "only certificates"},
		{"the proxy alone", "credential", signProxy(t, csr.PublicKey, aliceCert, alice.PrivateKey, now.Add(time.Hour*6)), 400, "malformed proxy"},
		{"another key", "credential", chainPEM(signProxy(t, &otherKey.PublicKey, aliceCert, alice.PrivateKey, now.Add(6*time.Hour)), aliceCert), 400, "does not match"},
		{"signed by Mallory", "credential", chainPEM(signProxy(t, csr.PublicKey, malloryCert, mallory.PrivateKey, now.Add(6*time.Hour)), malloryCert), 400, "not yours"},
		{"Mallory's chain behind Alice's proxy", "credential", chainPEM(signProxy(t, csr.PublicKey, aliceCert, alice.PrivateKey, now.Add(6*time.Hour)), malloryCert), 400, "Could not process the proxy"},
		{"expired", "credential", chainPEM(signProxy(t, csr.PublicKey, aliceCert, alice.PrivateKey, now.Add(-time.Minute)), aliceCert), 400, "Could not process the proxy"},
		{"oversize", "credential", bytes.Repeat([]byte("A"), 1<<20), 413, "bytes"},
	}
	for _, tc := range cases {
		c, b := s.call(t, s.hc, "PUT", "/delegation/"+dlg+"/"+tc.path, tc.body)
		if c != tc.code || !strings.Contains(b, tc.want) {
			t.Errorf("%s: %d %s, want %d saying %q", tc.name, c, b, tc.code, tc.want)
		}
	}
	// Another identity's delegation id.
	for _, p := range []string{"GET /delegation/0123456789abcdef", "GET /delegation/0123456789abcdef/request",
		"PUT /delegation/0123456789abcdef/credential", "DELETE /delegation/0123456789abcdef", "POST /delegation/0123456789abcdef/voms"} {
		method, path, _ := strings.Cut(p, " ")
		if c, b := s.call(t, s.hc, method, path, []byte(`[]`)); c != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", p, c, b)
		}
	}
	if c, b := s.call(t, s.hc, "GET", "/delegation/"+dlg, nil); c != 200 || strings.TrimSpace(b) != "null" {
		t.Fatalf("after the hostile puts: %d %s, want null (nothing stored)", c, b)
	}
	// The right one is still taken, once.
	good := chainPEM(signProxy(t, csr.PublicKey, aliceCert, alice.PrivateKey, now.Add(6*time.Hour)), aliceCert)
	if c, b := s.call(t, s.hc, "PUT", "/delegation/"+dlg+"/credential", good); c != http.StatusCreated {
		t.Fatalf("the proxy signed by Alice: %d %s", c, b)
	}
	if c, b := s.call(t, s.hc, "PUT", "/delegation/"+dlg+"/credential", good); c != 400 {
		t.Errorf("the same proxy again (its request consumed): %d %s", c, b)
	}
	// Six hours: a submission is taken (FTS3 wants one hour left).
	body := []byte(`{"files": [{"sources": ["` + s.src.URL + `/store/none"], "destinations": ["` + s.dst.URL + `/store/none"]}], "params": {"retry": 0}}`)
	if c, b := s.call(t, s.hc, "POST", "/jobs", body); c != 200 {
		t.Errorf("a submission with a delegation: %d %s", c, b)
	}
}

// Two instances on one PostgreSQL database, sealing the keys with one
// --delegation-key: a delegation begun at one is finished at the other,
// a job submitted at one moves with the proxy whichever instance runs
// it, and the database holds no private key in the clear.
func TestFTSDelegationTwoInstances(t *testing.T) {
	dsn := pgtest.NewDatabase(t, pgtest.Start(t))
	s := startDlgSites(t, dlgOptions{Sealed: true}, dsn, dsn)
	a, b := s.svcs[0], s.svcs[1]
	dlg := aliceDelegationID()
	alice, aliceCert := s.alice(t)
	code, reqPEM := s.callAt(t, a, s.hc, "GET", "/delegation/"+dlg+"/request", nil)
	blk, _ := pem.Decode([]byte(reqPEM))
	if code != 200 || blk == nil {
		t.Fatalf("GET request at the first instance: %d %s", code, reqPEM)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	proxy := chainPEM(signProxy(t, csr.PublicKey, aliceCert, alice.PrivateKey, time.Now().Add(5*time.Hour)), aliceCert)
	if code, b := s.callAt(t, b, s.hc, "PUT", "/delegation/"+dlg+"/credential", proxy); code != http.StatusCreated {
		t.Fatalf("the proxy put at the second instance: %d %s", code, b)
	}
	var info map[string]any
	if code, b := s.callAt(t, a, s.hc, "GET", "/delegation/"+dlg, nil); code != 200 || json.Unmarshal([]byte(b), &info) != nil || info["termination_time"] == nil {
		t.Fatalf("the delegation seen by the first instance: %d %s", code, b)
	}
	data := randomBytes(100000, 28)
	if err := os.WriteFile(filepath.Join(s.srcDir, "a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, svc := range s.svcs {
		body := fmt.Sprintf(`{"files": [{"sources": [%q], "destinations": [%q]}], "params": {"retry": 0}}`,
			s.src.URL+"/store/a", fmt.Sprintf("%s/store/two%d", s.dst.URL, i))
		code, b := s.callAt(t, svc, s.hc, "POST", "/jobs", []byte(body))
		var sub map[string]string
		if code != 200 || json.Unmarshal([]byte(b), &sub) != nil {
			t.Fatalf("submit at instance %d: %d %s", i, code, b)
		}
		ids = append(ids, sub["job_id"])
	}
	for i, id := range ids {
		if j := s.waitJob(t, id); j["job_state"] != "FINISHED" {
			t.Fatalf("job %d: %v", i, j)
		}
		name := fmt.Sprintf("two%d", i)
		sameBytes(t, name, readFile(t, filepath.Join(s.dstDir, name)), data)
		s.sawDN(t, "/store/"+name)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var key, chain string
	if err := conn.QueryRow(context.Background(), `SELECT priv_key, chain FROM credentials WHERE dlg_id = $1`, dlg).Scan(&key, &chain); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "wanda-sealed:v1:") || strings.Contains(key, "PRIVATE KEY") || !strings.Contains(chain, "BEGIN CERTIFICATE") {
		t.Errorf("the stored key is not sealed: %.40q...", key)
	}
}

// A VOMS proxy: the delegation id is FTS3's hash of the DN and the
// FQANs, the delegated proxy (signed by the VOMS proxy) keeps the
// attributes, and the job moves with it.
func TestFTSDelegationVOMS(t *testing.T) {
	s := startDlgSites(t, dlgOptions{VOMS: true}, "sqlite:"+filepath.Join(t.TempDir(), "t.db"))
	r := s.fts(t, "whoami", "-j")
	var who struct {
		DN    string   `json:"user_dn"`
		DlgID string   `json:"delegation_id"`
		VOs   []string `json:"vos"`
		VOMS  []string `json:"voms_cred"`
	}
	if err := json.Unmarshal(r.Stdout, &who); r.Err != nil || err != nil {
		t.Fatalf("fts-rest-whoami: %v %v\n%s%s", r.Err, err, r.Stdout, r.Stderr)
	}
	h := sha1.New()
	h.Write([]byte(aliceDN))
	for _, f := range dteamFQANs {
		h.Write([]byte(f))
	}
	dlg := hex.EncodeToString(h.Sum(nil))[:16]
	if who.DN != aliceDN || who.DlgID != dlg || strings.Join(who.VOs, ",") != "dteam,dteam/wanda" || strings.Join(who.VOMS, ",") != strings.Join(dteamFQANs, ",") {
		t.Fatalf("whoami: %+v, want delegation_id %s", who, dlg)
	}
	data := randomBytes(50000, 29)
	if err := os.WriteFile(filepath.Join(s.srcDir, "v"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	r = s.fts(t, "transfer-submit", s.src.URL+"/store/v", s.dst.URL+"/store/voms")
	m := jobIDLine.FindSubmatch(append(r.Stdout, r.Stderr...))
	if r.Err != nil || m == nil {
		t.Fatalf("fts-rest-transfer-submit with a VOMS proxy: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	if j := s.waitJob(t, string(m[1])); j["job_state"] != "FINISHED" || j["vo_name"] != "dteam" {
		t.Fatalf("the job: %v", j)
	}
	sameBytes(t, "voms", readFile(t, filepath.Join(s.dstDir, "voms")), data)
	s.sawDN(t, "/store/voms")
	var info struct {
		End  string   `json:"termination_time"`
		VOMS []string `json:"voms_attrs"`
	}
	if code, b := s.call(t, s.hc, "GET", "/delegation/"+dlg, nil); code != 200 || json.Unmarshal([]byte(b), &info) != nil ||
		strings.Join(info.VOMS, ",") != strings.Join(dteamFQANs, ",") || info.End == "" {
		t.Fatalf("GET /delegation/%s: %d %s", dlg, code, b)
	}
}

// vomsProxy makes a VOMS proxy of the user with voms-proxy-fake: an AC
// of VO dteam (dteamFQANs) signed by a VOMS server of the grid CA,
// which g.vomsDir names.
func (g *gridPKI) vomsProxy(t *testing.T) string {
	t.Helper()
	fake := requireTool(t, "voms-proxy-fake")
	openssl := requireTool(t, "openssl")
	d := g.dir
	key, csr, cert := filepath.Join(d, "voms.key"), filepath.Join(d, "voms.csr"), filepath.Join(d, "voms.pem")
	mustRun(t, d, openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/DC=org/DC=wanda-test/CN=voms.wanda-test.org")
	mustRun(t, d, openssl, "x509", "-req", "-in", csr, "-CA", filepath.Join(d, "ca.pem"), "-CAkey", filepath.Join(d, "ca.key"),
		"-set_serial", "4", "-days", "1", "-out", cert, "-extfile", filepath.Join(d, "ext.cnf"), "-extensions", "user")
	g.vomsDir = filepath.Join(d, "vomsdir")
	if err := os.MkdirAll(filepath.Join(g.vomsDir, "dteam"), 0o755); err != nil {
		t.Fatal(err)
	}
	lsc := "/DC=org/DC=wanda-test/CN=voms.wanda-test.org\n/DC=org/DC=wanda-test/CN=Wanda Test CA\n"
	if err := os.WriteFile(filepath.Join(g.vomsDir, "dteam", "voms.wanda-test.org.lsc"), []byte(lsc), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(d, "x509up-voms")
	args := []string{"-q", "-rfc", "-cert", g.userCert, "-key", g.userKey, "-certdir", g.caDir, "-hostcert", cert, "-hostkey", key,
		"-voms", "dteam", "-uri", "voms.wanda-test.org:15000", "-hours", "4", "-vomslife", "4", "-bits", "2048", "-out", out}
	for _, f := range dteamFQANs {
		args = append(args, "-fqan", f)
	}
	mustRun(t, d, fake, args...)
	return out
}

// otherUser is another user of the grid CA, made by openssl.
func (g *gridPKI) otherUser(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	openssl := requireTool(t, "openssl")
	d := g.dir
	key, csr, cert := filepath.Join(d, cn+".key"), filepath.Join(d, cn+".csr"), filepath.Join(d, cn+".pem")
	mustRun(t, d, openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/DC=org/DC=wanda-test/CN="+cn)
	mustRun(t, d, openssl, "x509", "-req", "-in", csr, "-CA", filepath.Join(d, "ca.pem"), "-CAkey", filepath.Join(d, "ca.key"),
		"-set_serial", "3", "-days", "1", "-out", cert, "-extfile", filepath.Join(d, "ext.cnf"), "-extensions", "user")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// signProxy makes an RFC 3820 proxy of issuer for pub, as FTS3's
// delegator does (the issuer's subject and a numeric CN), ending at
// notAfter; it returns it as PEM.
func signProxy(t *testing.T, pub any, issuer *x509.Certificate, key any, notAfter time.Time) []byte {
	t.Helper()
	var name pkix.RDNSequence
	if _, err := asn1.Unmarshal(issuer.RawSubject, &name); err != nil {
		t.Fatal(err)
	}
	name = append(name, pkix.RelativeDistinguishedNameSET{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "1234567"}})
	raw, err := asn1.Marshal(name)
	if err != nil {
		t.Fatal(err)
	}
	type lang struct{ OID asn1.ObjectIdentifier }
	type pci struct{ Policy lang }
	info, err := asn1.Marshal(pci{lang{asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), RawSubject: raw,
		NotBefore: notAfter.Add(-12 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, BasicConstraintsValid: true,
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 14}, Critical: true, Value: info}}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// chainPEM is a proxy (PEM) followed by certs.
func chainPEM(proxy []byte, certs ...*x509.Certificate) []byte {
	out := append([]byte{}, proxy...)
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// aliceDelegationID is alice's delegation id as FTS3 makes it: the SHA-1
// of the DN and the FQANs (none), 16 hex digits.
func aliceDelegationID() string {
	sum := sha1.Sum([]byte(aliceDN))
	return hex.EncodeToString(sum[:])[:16]
}

// alice is the user's certificate and key, and the certificate parsed.
func (s *dlgSite) alice(t *testing.T) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(s.userCert, s.userKy)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return pair, c
}

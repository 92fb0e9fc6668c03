package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/testcert"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

func TestTLSSwitch(t *testing.T) {
	cert := testcert.New(t)
	cfg, caPEM := cert.ServerConfig(), cert.CertPEM
	ts := startServer(t, func(o *Options) { o.TLS = cfg })
	want := ts.writeFile(t, "f", 200<<10)

	// A client that does not ask keeps plain TCP but learns TLS is there.
	rc := dialRaw(t, ts.addr)
	b := rc.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion, Flags: xrootd.ProtoAbleTLS}.Body(), nil)
	if p, _ := xrootd.DecodeProtocolResponse(b); p.Flags&xrootd.FlagHaveTLS == 0 || p.Flags&xrootd.FlagGotoTLS != 0 {
		t.Errorf("flags %x", p.Flags)
	}
	rc.login()

	// One that asks switches after the answer.
	rc = dialRaw(t, ts.addr)
	b = rc.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion, Flags: xrootd.ProtoWantTLS}.Body(), nil)
	if p, _ := xrootd.DecodeProtocolResponse(b); p.Flags&xrootd.FlagGotoTLS == 0 {
		t.Fatalf("flags %x: no kXR_gotoTLS", p.Flags)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tc := tls.Client(rc.c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	rc.c = tc
	rc.login()
	h := rc.open("/store/f", xrootd.OpenRead)
	if got := rc.mustOK(xrootd.ReqRead, xrootd.ReadRequest{Handle: h, Length: 300 << 10}.Body(), nil); !bytes.Equal(got, want) {
		t.Errorf("read over TLS: %d bytes differ", len(got))
	}

	// Without TLS configured nothing is offered.
	plain := startServer(t)
	rc = dialRaw(t, plain.addr)
	b = rc.mustOK(xrootd.ReqProtocol, xrootd.ProtocolRequest{ClientPV: xrootd.ProtocolVersion, Flags: xrootd.ProtoWantTLS}.Body(), nil)
	if p, _ := xrootd.DecodeProtocolResponse(b); p.Flags&(xrootd.FlagHaveTLS|xrootd.FlagGotoTLS) != 0 {
		t.Errorf("flags %x without TLS", p.Flags)
	}
}

func TestXrdcpRoots(t *testing.T) {
	requireTool(t, "xrdcp")
	cert := testcert.New(t)
	cfg, caPEM := cert.ServerConfig(), cert.CertPEM
	ts := startServer(t, func(o *Options) { o.TLS = cfg })
	want := ts.writeFile(t, "f", 5<<20)
	env := []string{"X509_CERT_DIR=" + caDir(t, caPEM)}
	dst := filepath.Join(t.TempDir(), "f")
	url := strings.Replace(ts.URL("store/f"), "root://", "roots://", 1)
	mustRunEnv(t, env, "xrdcp", "-s", "-f", url, dst)
	sameFile(t, dst, want)
	up := strings.Replace(ts.URL("store/up"), "root://", "roots://", 1)
	mustRunEnv(t, env, "xrdcp", "-s", dst, up)
	sameFile(t, filepath.Join(ts.dir, "up"), want)
}

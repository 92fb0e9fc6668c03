package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/wan"
	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// tpcXRootD is XRootD's side of the tpc experiment: a source and a
// destination xrootd with XrdHttpTPC (over HTTPS) and root:// TPC.
type tpcXRootD struct {
	src, dst *xrdpeer.Server
	tls      *tls.Config // the bench's client: trusts the servers' certificate
	name     string
	size     int64
}

// tpcRelays are the relays in front of XRootD's source: its HTTPS port
// and its xroot port.
type tpcRelays struct {
	https, root string
	rl          []*wan.Relay
}

func (t *tpcRelays) close() {
	if t == nil {
		return
	}
	for _, r := range t.rl {
		r.Close()
	}
}

// lines is how many lines per RTT and repetition XRootD adds.
func (x *tpcXRootD) lines() int {
	if x == nil {
		return 0
	}
	return 3 // XrdHttpTPC without and with 4 streams, xrdcp --tpc
}

func startTPCXRootD(ctx context.Context, r *Run, e *tpcEnv) (*tpcXRootD, error) {
	if !r.Have("xrootd") || !r.Have("xrdcp") || !xrdpeer.HavePlugin("libXrdHttpTPC") {
		r.Note("xrootd with XrdHttpTPC: not installed (apt-get install xrootd-server xrootd-server-plugins xrootd-client), no XRootD lines")
		return nil, nil
	}
	sec := filepath.Join(r.Dir(), "xrootd-tls")
	if err := os.MkdirAll(sec, 0o755); err != nil {
		return nil, err
	}
	certFile, keyFile, err := benchCert(sec)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	x := &tpcXRootD{tls: &tls.Config{RootCAs: pool}, name: e.name, size: e.size}
	start := func(name, dir string, writable bool) (*xrdpeer.Server, error) {
		return xrdpeer.Start(ctx, xrdpeer.Options{
			Dir: dir, Writable: writable, HTTPTPC: true, RootTPC: true, TLSCert: certFile, TLSKey: keyFile,
			Work: filepath.Join(r.Dir(), name), Log: r.Log(),
		})
	}
	if x.src, err = start("xrootd-source", e.data, false); err != nil {
		if errors.Is(err, xrdpeer.ErrNotInstalled) {
			r.Note("xrootd: %v, no XRootD lines", err)
			return nil, nil
		}
		return nil, err
	}
	r.Cleanup(func() { x.src.Close() })
	xout := filepath.Join(r.Dir(), "xrootd-out")
	if err := os.MkdirAll(xout, 0o755); err != nil {
		return nil, err
	}
	if x.dst, err = start("xrootd-destination", xout, true); err != nil {
		return nil, err
	}
	r.Cleanup(func() { x.dst.Close() })
	r.Note("XRootD: xrootd %s with XrdHttpTPC over HTTPS (a self-signed certificate made by the run; XrdHttpTPC's libcurl checks it) and root:// TPC (`ofs.tpc ... pgm xrdcp --server`), source and destination each its own xrootd", r.toolVersionSeen("xrootd"))
	return x, nil
}

func (x *tpcXRootD) relays(ctx context.Context, r *Run, cfg wan.Config) (*tpcRelays, error) {
	t := &tpcRelays{}
	for _, to := range []string{strings.TrimPrefix(x.src.HTTPS, "https://"), x.src.Addr} {
		rl, addr, err := r.Relay(ctx, cfg, to)
		if err != nil {
			t.close()
			return nil, err
		}
		t.rl = append(t.rl, rl)
		if t.https == "" {
			t.https = addr
		} else {
			t.root = addr
		}
	}
	return t, nil
}

func (x *tpcXRootD) run(ctx context.Context, r *Run, rel *tpcRelays, rtt time.Duration, rep int, i *int, n int, link, bound float64) error {
	cfg := wan.Config{RTT: rtt}
	for _, streams := range []int{0, 4} {
		*i++
		r.Step(fmt.Sprintf("rtt=%s xrootd http-tpc streams=%d rep=%d", rtt, streams, rep+1), *i, n)
		secs, err := tpcCopy(ctx, x.tls, x.dst.HTTPS+"/"+x.name, "https://"+rel.https+"/"+x.name, streams, x.size, cfg)
		if err != nil {
			return fmt.Errorf("XRootD HTTP-TPC, %d streams, rtt %s: %w (destination log: %s)", streams, rtt, err, x.dst.LogTail(5))
		}
		tpcRow(r, "xrootd", "http-tpc", rtt, streams, x.size, secs, link, bound)
	}
	*i++
	r.Step(fmt.Sprintf("rtt=%s xrootd xrdcp --tpc rep=%d", rtt, rep+1), *i, n)
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, netBound(x.size, cfg))
	defer cancel()
	if err := netCmd(cctx, "xrdcp", "-s", "-f", "--tpc", "only", "root://"+rel.root+"//"+x.name, x.dst.URL("/"+x.name)); err != nil {
		return fmt.Errorf("xrdcp --tpc only, rtt %s: %w (destination log: %s)", rtt, err, x.dst.LogTail(5))
	}
	tpcRow(r, "xrootd", "xrdcp-tpc", rtt, 1, x.size, time.Since(t0).Seconds(), link, bound)
	return nil
}

package bench

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// XCachePeer is a running XCache: XRootD as a caching proxy (the Pss proxy
// storage with the Pfc file cache) with XrdHttp on a second port.
type XCachePeer struct {
	// Addr is host:port of its xroot protocol.
	Addr string
	// HTTP is the base URL of its XrdHttp port ("http://127.0.0.1:P");
	// a file root://origin//name is http://127.0.0.1:P/name here.
	HTTP string
}

// StartXCache starts XCache in front of the xroot server at origin
// (host:port, e.g. a StartXRootD peer) with peers/README.md's settings
// (1 MiB blocks, prefetch 10, 1 GiB of RAM, disk usage 0.90/0.95), caching
// in a directory of the scratch, and stops it at the run's cleanup. Like
// StartXRootD it runs as the `xrootd` user when wanda runs as root (the
// cache directory is that user's), and without xrootd or its proxy and
// cache plugins (xrootd-server-plugins) it notes why and returns ok ==
// false.
func (r *Run) StartXCache(ctx context.Context, origin string) (p XCachePeer, ok bool, err error) {
	if !r.Have("xrootd") {
		r.Note("xrootd: not installed (apt-get install xrootd-server xrootd-server-plugins), XCache skipped")
		return p, false, nil
	}
	n := strconv.Itoa(peerSeq())
	s, err := xrdpeer.Start(ctx, xrdpeer.Options{
		Dir:      filepath.Join(r.Dir(), "xcache-data-"+n),
		Work:     filepath.Join(r.Dir(), "xcache-"+n),
		Writable: true,
		Checksum: "none",
		HTTP:     true, // XrdHttp listens once the proxy and the cache loaded
		Plugins:  []string{"libXrdPss", "libXrdPfc"},
		Extra: []string{
			"ofs.osslib libXrdPss.so",
			"pss.origin " + origin,
			"pss.cachelib libXrdPfc.so",
			"pfc.blocksize 1M",
			"pfc.prefetch 10",
			"pfc.ram 1g",
			"pfc.diskusage 0.90 0.95",
			"http.listingdeny true",
		},
		Log: r.Log(),
	})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		r.Note("xrootd: %v, XCache skipped", err)
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	r.Cleanup(func() { s.Close() })
	return XCachePeer{Addr: s.Addr, HTTP: s.HTTP}, true, nil
}

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
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
// StartXRootD it runs as the `xrootd` user when wanda runs as root, and
// without xrootd or its proxy and cache plugins (xrootd-server-plugins)
// it notes why and returns ok == false.
func (r *Run) StartXCache(ctx context.Context, origin string) (p XCachePeer, ok bool, err error) {
	if !r.Have("xrootd") {
		r.Note("xrootd: not installed (apt-get install xrootd-server xrootd-server-plugins), XCache skipped")
		return p, false, nil
	}
	if !xrdPluginInstalled("libXrdPfc") || !xrdPluginInstalled("libXrdPss") || !xrdPluginInstalled("libXrdHttp") {
		r.Note("xrootd: the proxy, cache or HTTP plugin (libXrdPss, libXrdPfc, libXrdHttp) is missing (apt-get install xrootd-server-plugins), XCache skipped")
		return p, false, nil
	}
	var prefix []string
	n := strconv.Itoa(peerSeq())
	admin := filepath.Join(r.Dir(), "xcache-"+n)
	data := filepath.Join(r.Dir(), "xcache-data-"+n)
	for _, d := range []string{admin, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return p, false, err
		}
	}
	if os.Geteuid() == 0 {
		u, uerr := user.Lookup("xrootd")
		if uerr != nil || !r.Have("setpriv") {
			r.Note("xrootd: refuses to run as root and there is no `xrootd` user or setpriv to run it as, XCache skipped")
			return p, false, nil
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, d := range []string{admin, data} {
			if err := os.Chown(d, uid, gid); err != nil {
				return p, false, fmt.Errorf("xcache dir: %w", err)
			}
		}
		// Its user must reach the directories through the scratch's
		// ancestors.
		restore, err := peerReadable(admin)
		r.Cleanup(restore)
		if err != nil {
			return p, false, fmt.Errorf("xcache: make %s reachable: %w", admin, err)
		}
		prefix = []string{"setpriv", "--reuid=xrootd", "--regid=xrootd", "--init-groups"}
	}
	port, err := peerFreePort()
	if err != nil {
		return p, false, err
	}
	httpPort, err := peerFreePort()
	if err != nil {
		return p, false, err
	}
	cfg := fmt.Sprintf(`all.role server
all.export /
xrd.port %d
xrd.allow host localhost
all.adminpath %s
all.pidpath %s
ofs.osslib libXrdPss.so
pss.origin %s
pss.cachelib libXrdPfc.so
oss.localroot %s
pfc.blocksize 1M
pfc.prefetch 10
pfc.ram 1g
pfc.diskusage 0.90 0.95
xrd.protocol XrdHttp:%d libXrdHttp.so
http.listingdeny true
`, port, admin, admin, origin, data, httpPort)
	cfgPath := filepath.Join(admin, "xcache.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return p, false, err
	}
	logPath := filepath.Join(admin, "xcache.log")
	args := append(prefix, "xrootd", "-I", "v4", "-c", cfgPath, "-l", "="+logPath)
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	// XrdHttp listens once the whole configuration loaded: waiting for
	// its port waits for the proxy and the cache too.
	if err := r.startPeer(ctx, "xcache", args, httpAddr, logPath); err != nil {
		return p, false, err
	}
	return XCachePeer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), HTTP: "http://" + httpAddr}, true, nil
}

// xrdPluginInstalled looks for an XRootD plugin library (any version
// suffix) where Debian, Fedora and source builds put them.
func xrdPluginInstalled(stem string) bool {
	for _, pat := range []string{"/usr/lib/*/" + stem + "*.so*", "/usr/lib64/" + stem + "*.so*", "/usr/lib/" + stem + "*.so*", "/usr/local/lib*/" + stem + "*.so*"} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return true
		}
	}
	return false
}

// Package xrdpeer launches XRootD's own daemons (xrootd and cmsd, as the
// xrootd-server packages install them) on loopback, as peers for wanda's
// interoperability tests and as baselines for its benchmarks: a data
// server exporting a directory (optionally with XrdHttp, TLS, bearer
// tokens — SciTokens authorization and ztn —, or any other configuration
// lines), and a cluster of a cmsd redirector (role
// manager) with data servers subscribed to it.
//
// It is hand-written because nothing else does this job: XRootD ships no
// embeddable server, only daemons that read a configuration file, bind
// their own ports, refuse to run as root and log to a file. So the
// launcher runs them as the `xrootd` user when this process is root
// (setpriv), makes their directories reachable to that user, picks ports
// that were free a moment ago (it retries with other ports when one was
// taken meanwhile), writes the configuration, starts each daemon in a
// process group of its own, polls until it listens (no sleeps), quotes
// the end of its log when it fails, and stops the whole group on Close
// (SIGTERM, then SIGKILL after StopTimeout).
//
// XRootD has no directive to listen on one address (every port is bound
// on all interfaces): `xrd.allow host localhost` and `cms.allow host
// localhost` refuse every client but this host's, and the addresses
// handed out are 127.0.0.1's.
//
// Whether a missing XRootD is a skip, a failure or a note is the
// caller's decision: Start and StartCluster return an error matching
// ErrNotInstalled when a daemon, a plugin it needs, or (as root) the
// xrootd user or setpriv is missing.
package xrdpeer

// Package xrdpeer launches XRootD's own daemons (xrootd and cmsd, as the
// xrootd-server packages install them) on loopback, as peers for wanda's
// interoperability tests and as baselines for its benchmarks: a data
// server exporting a directory (optionally with XrdHttp, TLS, bearer
// tokens — SciTokens authorization and ztn —, HTTP and root://
// third-party copy, or any other configuration lines), and a cluster of
// a cmsd redirector (role manager) with data servers subscribed to it.
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
// Third-party copy (Options.HTTPTPC, Options.RootTPC), as XRootD 5.5.3
// does it and as the tests here drive it with gfal-copy, davix-cp and
// xrdcp between two servers:
//
//   - HTTP-TPC (XrdHttpTPC) is loaded only with HTTPS: XrdHttp loads its
//     external handlers after its TLS setup, and XrdHttpTPC gives up
//     without a CA directory or file for its libcurl (`xrd.tlsca
//     certdir`, so not `noverify`). A COPY is answered 201 Created,
//     Content-Type text/plain, chunked (not 202 nor
//     text/perf-marker-stream); a marker is sent at once and every 5 s;
//     the last chunk is "success: Created" or "failure: ...".
//   - XrdHttp 5.5.3 keeps header names as the client spelled them, and
//     XrdHttpTPC looks them up exactly: Source, Destination, Credential,
//     Overwrite, X-Number-Of-Streams and the TransferHeader prefix.
//   - XrdHttpTPC refuses any Credential header but "none" (400, log
//     "COPY requested an unsupported credential type:  gridsite").
//     gfal2 2.21 sends "Credential: gridsite" when the passive end is
//     https:// and it has no token for it, so gfal-copy between two
//     https:// URLs works only with a token (BEARER_TOKEN: then
//     "Credential: none" and TransferHeaderAuthorization), or with the
//     passive end named http:// (same port, plain HTTP). davix-cp sends
//     no Credential header.
//   - A client that drops the marker stream cancels the transfer: the
//     failed write of the next marker (within 5 s) ends it
//     (PERFMARKER_FAIL in the log); the destination file stays, as far
//     as it was written (a pull opens it with O_TRUNC first).
//   - root:// TPC needs no allow list for loopback. A copy whose
//     rendezvous never matches (wrong key, origin, destination host or
//     path) fails after the 15 s maximum TTL: "[3010] tpc authorization
//     expired", relayed to the client as kXR_error 3005; autorm removes
//     the destination file. With Tokens the client's ztn token is
//     forwarded to the copy program (fcreds), which then reads from
//     tpc.dlg without a key: without that, its TLS login to the source
//     fails on the [::ffff:127.0.0.1] address XrdCl puts in tpc.src
//     ("hostname not in SAN extension").
//   - Certificates: NewCA and its ServerCert give peers a CA whose
//     subject does not collide with the CN=localhost snakeoil
//     certificate in /etc/ssl/certs, which davix (and so gfal2) finds
//     before --capath or X509_CERT_DIR; WriteCADir lays out a hashed CA
//     directory for X509_CERT_DIR, --capath and Options.CADir.
//
// Whether a missing XRootD is a skip, a failure or a note is the
// caller's decision: Start and StartCluster return an error matching
// ErrNotInstalled when a daemon, a plugin it needs, or (as root) the
// xrootd user or setpriv is missing.
package xrdpeer

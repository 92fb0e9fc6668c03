// Package xrdclient is the root:// transport of wanda's client engine
// (package client): `wanda cp root://...` gets the same parallel streams,
// vector reads, retries, redirects, failover and end-to-end checksums as
// over HTTP, from XRootD's own servers, EOS, dCache and wanda alike.
//
// It speaks the XRootD protocol with the wire types of package xrootd and
// keeps to the engine's contract: one request sequence per call, no policy.
// A kXR_redirect is answered as *client.RedirectError (the engine follows
// it, caches the route and asks the redirector again, with `tried=`, when
// the server it chose fails); a kXR_error as *Error, which matches the
// engine's sentinels (kXR_NotFound is client.ErrNotFound, never retried)
// and says whether the server's trouble is worth a retry. kXR_wait is
// honoured here, on the same connection, since it is part of one request.
//
// Each engine stream takes its own connection from a per-server pool
// (handshake, kXR_protocol, TLS for roots:// or when the server says
// kXR_gotoTLS, kXR_login, kXR_auth with unix or host when the server
// asks), so parallel streams get parallel TCP windows. A stream's
// kXR_read requests are pipelined (Options.ReadAhead) and each answer is
// streamed from the socket into the caller's buffer; the kXR_close of a
// file read is not waited for (its answer is read by the connection's next
// user), so a chunk costs two round trips, kXR_open and its first read.
// Connections are bound to the caller's context: a deadline becomes the
// socket's, and the engine's stall watchdog ending the context unblocks
// the socket at once; such a connection, like any that saw an I/O error or
// a protocol violation, is closed, never reused.
//
// Writes are kXR_open (kXR_new, or kXR_delete to replace; kXR_mkpath),
// pipelined kXR_write and kXR_close, then the server's checksum compared
// with the caller's. XRootD offers no atomic publish of a file written in
// parts, so the transport does not implement client.PartWriter: uploads
// go in one stream per file.
//
// ThirdPartyCopy makes one server pull a file from another (XRootD's
// rendezvous, as `xrdcp --tpc only`): this client only opens files and
// waits.
package xrdclient

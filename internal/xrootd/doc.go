// Package xrootd holds the XRootD protocol's wire format (root://, port
// 1094): request and response frames, their typed bodies, the handshake,
// the text answers (stat, dirlist, locate) and the pgread/pgwrite page
// layout with its CRC32C per 4 KiB page. It does no I/O: callers hand it
// bytes and get values back, so it is fuzzed on its own and shared by the
// server front-end (package xrootd/server) and any client transport. It
// imports nothing of wanda's storage or auth, so a client can depend on it
// without pulling in the server side (deps_test.go keeps it that way).
//
// Why written by hand from the specification (the XRootD protocol reference
// 5.x and XProtocol.hh) rather than reusing go-hep's xrootd packages: those
// lack kXR_readv on the server, kXR_pgread/kXR_pgwrite and kXR_status,
// TLS capability flags and authentication hooks, their server handler has
// no context, and their file handler joins the request path onto the export
// so that "/../../etc/hostname" escapes it. go-hep is kept as an independent
// test peer only.
//
// Layout on the wire, all integers big-endian:
//
//	request:  streamid[2] requestid[2] body[16] dlen[4] data[dlen]
//	response: streamid[2] status[2] dlen[4] data[dlen]
//
// A kXR_status response (pgread, pgwrite) carries a 16-byte status body and
// an info part in its dlen, and its data (the body's own dlen) after them.
package xrootd

// Package cms is the wire format of XRootD's cluster management protocol,
// the one cmsd daemons speak to each other (manager port 1213 by
// convention): frame headers, the XrdOucPup packing of their data, and one
// type per message (login, state, have, gone, load, avail, try, the
// forwarded namespace operations, responses). It does no network I/O and
// holds no federation logic: package fed/cmsd keeps the conversations
// (a wanda member logged in to an XRootD manager, XRootD members logged in
// to a wanda redirector) on top of it. Every decoder here takes hostile
// bytes and is fuzzed.
//
// Written by hand from XRootD's YProtocol.hh (protocol version 3, the one
// XRootD 5 speaks) and XrdOucPup: no Go library speaks cmsd (go-hep's
// xrootd packages cover root:// only).
//
// A frame, integers big-endian:
//
//	streamid[4] code[1] modifier[1] datalen[2] data[datalen]
//
// The data of most messages is a list of packed items: a string is its
// length[2] then its bytes (a C string's NUL counted and included); an
// integer is a type byte (0x80 short, 0xa0 int, 0xc0 long long) and the
// value, or, for an int whose top four bits are clear, the value itself
// with 0xb0 or'ed into its first byte. Items after a "fence" may be left
// out. Messages with the raw modifier (0x20) carry a bare path instead.
//
// Request and response codes share one byte: what a code means depends on
// which side sent it (a manager's ping is 17; a member's kYR_error answer
// is 1, which is also chmod's request code). Decoders take the side's view.
package cms

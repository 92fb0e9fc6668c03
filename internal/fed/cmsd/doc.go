// Package cmsd makes wanda a member of XRootD's cmsd federations and lets
// XRootD's daemons be members of wanda's, over the cmsd protocol (wire
// format: package xrootd/cms). It holds the two conversations:
//
//   - Uplink: a wanda server (as a data server) or a wanda redirector (as
//     a manager of its own members) logged in to an XRootD manager or
//     meta-manager: it answers the manager's state queries with have, tells
//     it of files created and removed (have, gone), reports load and
//     space, answers ping, usage and space, follows try, logs in again
//     with backoff when the manager goes away, and maps a drain to cmsd's
//     suspend.
//   - Listener: a wanda redirector that takes cmsd logins (XRootD data
//     servers, supervisors, site managers): each node becomes a member of
//     the redirector (fed.Asker answers where a file is: state, and for a
//     data server a kXR_stat on its data port for a fast "no"), learns
//     from their have and gone, pings them, and drops them when their
//     connection ends.
//
// The redirector sees members, never protocols: a cmsd node joins through
// the same calls a wanda member's heartbeat does (Cluster).
//
// Written by hand: no Go library speaks cmsd. What is and is not
// supported of the protocol is in docs/federation.md ("Joining AAA").
package cmsd

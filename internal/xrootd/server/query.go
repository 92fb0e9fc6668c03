package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// query answers kXR_query as XRootD does for the types that mean
// something here: checksum, config, space, stats, prepare.
func (ss *session) query(ctx context.Context, r *request) error {
	q := xrootd.DecodeQuery(r.hdr.Body)
	switch q.Type {
	case xrootd.QueryChecksum:
		return ss.checksum(ctx, r)
	case xrootd.QueryChecksumCancel, xrootd.QueryPrepare:
		return r.ok()
	case xrootd.QueryConfig:
		return ss.config(r)
	case xrootd.QuerySpace:
		t, err := ss.resolve(string(r.data))
		if err != nil {
			return err
		}
		if err := ss.authorize(ctx, auth.Read, t); err != nil {
			return err
		}
		free, total := ss.space(ctx, t)
		return r.okText(fmt.Sprintf("oss.cgroup=default&oss.space=%d&oss.free=%d&oss.maxf=%d&oss.used=%d&oss.quota=-1", total, free, free, total-free))
	case xrootd.QueryStats:
		return r.okText(ss.stats())
	case xrootd.QueryOpaqueHandle:
		return ss.fcntl(r, q.Handle)
	case xrootd.QueryXattr, xrootd.QueryVisa, xrootd.QueryFileInfo, xrootd.QueryFSInfo,
		xrootd.QueryOpaque, xrootd.QueryOpaqueFile:
		return errorf(xrootd.CodeUnsupported, "query type %d is not supported", q.Type)
	}
	return errorf(xrootd.CodeArgInvalid, "invalid information query type code %d", q.Type)
}

// checksum answers a checksum query: "<alg> <hex>" of the path, the
// algorithm from the opaque "cks.type" or the first configured. A backend
// that keeps checksums (storage.Checksummer) is asked; else the file is
// read through.
func (ss *session) checksum(ctx context.Context, r *request) error {
	t, err := ss.target(ctx, string(r.data), auth.Read)
	if err != nil {
		return err
	}
	alg := ss.srv.opts.Checksums[0]
	if v := cgiValue(t.cgi, "cks.type"); v != "" {
		alg = checksum.Canonical(v)
		if alg == "" || !slices.Contains(ss.srv.opts.Checksums, alg) {
			return errorf(xrootd.CodeServerError, "%s checksum not supported.", v)
		}
	}
	be := t.export.Backend
	var sum []byte
	if cs, ok := be.(storage.Checksummer); ok {
		sum, err = cs.Checksum(ctx, t.rel, alg)
	} else {
		sum, err = readChecksum(ctx, be, t.rel, alg)
	}
	if err != nil {
		return err
	}
	return r.okText(alg + " " + checksum.Hex(sum))
}

// readChecksum computes alg over the whole file.
func readChecksum(ctx context.Context, be storage.Backend, name, alg string) ([]byte, error) {
	f, err := be.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return checksum.Compute(ctx, alg, io.NewSectionReader(f, 0, fi.Size))
}

// config answers a config query: one line per key asked, "key" itself for
// keys with no value (as XRootD).
func (ss *session) config(r *request) error {
	keys := strings.Fields(string(trimNUL(r.data)))
	if len(keys) == 0 {
		return errorf(xrootd.CodeArgMissing, "query config argument not specified.")
	}
	if len(keys) > 64 {
		return errorf(xrootd.CodeArgTooLong, "too many query config arguments.")
	}
	var b strings.Builder
	for _, k := range keys {
		v := k
		switch k {
		case "bind_max":
			v = strconv.Itoa(maxPaths - 1)
		case "chksum":
			var list []string
			for i, a := range ss.srv.opts.Checksums {
				list = append(list, strconv.Itoa(i)+":"+a)
			}
			v = strings.Join(list, ",")
		case "readv_ior_max":
			v = strconv.Itoa(xrootd.MaxReadVData)
		case "readv_iov_max":
			v = strconv.Itoa(xrootd.MaxReadVSegs)
		case "pio_max":
			v = strconv.Itoa(ss.srv.opts.Workers)
		case "role":
			v = "server"
		case "tpc":
			// Any server can be a copy's source; a destination
			// without Options.TPC refuses the open, saying so.
			v = "1"
		case "version":
			v = "wanda"
		case "xrootd", "cmsd":
			v = ""
		}
		b.WriteString(v)
		b.WriteByte('\n')
	}
	return r.ok([]byte(b.String()))
}

// stats is a minimal kXR_QStats answer in XRootD's XML shape.
func (ss *session) stats() string {
	host, port, _ := net.SplitHostPort(ss.main.local)
	return fmt.Sprintf(`<statistics tod="%d" ver="wanda" src="%s" tos="%d" pgm="xrootd" ins="anon" pid="%d" site=""><stats id="info"><host>%s</host><port>%s</port><name>anon</name></stats></statistics>`,
		time.Now().Unix(), net.JoinHostPort(host, port), time.Now().Unix(), os.Getpid(), host, port)
}

// locate answers kXR_locate: on a redirector (Options.Locate) the servers
// that hold the path, else this server itself when it has the path ("*"
// alone: any path), at the address the client reached it by.
func (ss *session) locate(ctx context.Context, r *request) error {
	p := string(trimNUL(r.data))
	anyPath := p == "*"
	p = strings.TrimPrefix(p, "*")
	access := byte('r')
	if !anyPath {
		t, err := ss.resolve(p)
		if err != nil {
			return err
		}
		if err := ss.authorize(ctx, auth.Read, t); err != nil {
			return err
		}
		if ss.srv.opts.Locate != nil {
			hosts, err := ss.lookup(ctx, r, LocateRequest{Path: t.Path()})
			switch {
			case errors.Is(err, storage.ErrUpstream), errors.Is(err, storage.ErrUpstreamTimeout):
				return r.out.send(r.hdr.StreamID, xrootd.StatusWait,
					xrootd.WaitResponse{Seconds: redirectWait, Msg: t.Path() + ": locating the file; " + err.Error()}.Append(nil))
			case err != nil:
				return err
			case len(hosts) == 0:
				return errorf(xrootd.CodeNotFound, "%s: no server has it", t.Path())
			}
			locs := make([]xrootd.Location, 0, len(hosts))
			for _, h := range hosts {
				locs = append(locs, xrootd.Location{Kind: 'S', Access: 'r', Addr: h})
			}
			return r.ok(append(xrootd.AppendLocations(nil, locs), 0))
		}
		switch {
		case t.found:
			if _, err := t.export.Backend.Stat(ctx, t.rel); err != nil {
				return err
			}
			if ss.authorize(ctx, auth.Write, t) == nil {
				access = 'w'
			}
		case ss.virtual(t) == nil:
			return errNoExport(t)
		}
	}
	loc := xrootd.Location{Kind: 'S', Access: access, Addr: r.c.local}
	return r.ok(append(xrootd.AppendLocations(nil, []xrootd.Location{loc}), 0))
}

// prepare answers kXR_prepare: files on disk are always ready, so staging
// is a no-op (as XRootD's data server without a staging plug-in).
func (ss *session) prepare(ctx context.Context, r *request) error {
	for _, p := range strings.Split(string(trimNUL(r.data)), "\n") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if _, err := ss.target(ctx, p, auth.Read); err != nil {
			return err
		}
	}
	return r.ok()
}

package server

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sendfile copies n bytes of f at off to the socket behind dst with
// sendfile(2). The offset is passed explicitly, so f's own position is
// neither used nor moved: concurrent reads of one open file do not race.
// It waits for the socket as the runtime poller says (and so honours its
// write deadline).
func sendfile(dst syscall.RawConn, f *os.File, off, n int64) (int64, error) {
	src, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sent int64
	var serr error
	cerr := src.Control(func(sfd uintptr) {
		werr := dst.Write(func(dfd uintptr) bool {
			for sent < n {
				chunk := int(min(n-sent, 1<<30))
				k, err := unix.Sendfile(int(dfd), int(sfd), &off, chunk)
				if k > 0 {
					sent += int64(k)
				}
				switch {
				case errors.Is(err, unix.EAGAIN):
					return false // wait until writable
				case errors.Is(err, unix.EINTR):
					continue
				case err != nil:
					serr = err
					return true
				case k == 0:
					return true // end of file
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if serr == nil {
		serr = cerr
	}
	return sent, serr
}

// sendMore writes p to the socket with MSG_MORE: the kernel holds it to
// go out with the bytes that follow (a frame header with its sendfile
// body), saving a small packet per frame.
func sendMore(dst syscall.RawConn, p []byte) error {
	var serr error
	werr := dst.Write(func(fd uintptr) bool {
		for len(p) > 0 {
			k, err := unix.SendmsgN(int(fd), p, nil, nil, unix.MSG_MORE)
			if k > 0 {
				p = p[k:]
			}
			switch {
			case errors.Is(err, unix.EAGAIN):
				return false
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				serr = err
				return true
			}
		}
		return true
	})
	if serr != nil {
		return serr
	}
	return werr
}

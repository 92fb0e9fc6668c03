//go:build !linux

package server

import (
	"io"
	"os"
	"syscall"
)

// sendfile copies n bytes of f at off to the socket behind dst through a
// buffer (sendfile(2) with an explicit offset is Linux's).
func sendfile(dst syscall.RawConn, f *os.File, off, n int64) (int64, error) {
	buf := make([]byte, 256<<10)
	var sent int64
	for sent < n {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), n-sent)], off+sent)
		if k > 0 {
			var werr error
			p := buf[:k]
			err2 := dst.Write(func(fd uintptr) bool {
				for len(p) > 0 {
					m, err := syscall.Write(int(fd), p)
					if m > 0 {
						p = p[m:]
					}
					if err == syscall.EAGAIN {
						return false
					}
					if err != nil {
						werr = err
						return true
					}
				}
				return true
			})
			if werr == nil {
				werr = err2
			}
			if werr != nil {
				return sent, werr
			}
			sent += int64(k)
		}
		if err == io.EOF {
			return sent, nil
		}
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// sendMore writes p to the socket (MSG_MORE is Linux's).
func sendMore(dst syscall.RawConn, p []byte) error {
	var serr error
	werr := dst.Write(func(fd uintptr) bool {
		for len(p) > 0 {
			m, err := syscall.Write(int(fd), p)
			if m > 0 {
				p = p[m:]
			}
			if err == syscall.EAGAIN {
				return false
			}
			if err != nil {
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

package server

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
	"github.com/wanda-fed/wanda/internal/xrootd"
)

// TestWriteCodes: the storage's errors on the write path answer the
// kXR codes of docs/operations.md ("Status codes of the write path"), as
// XRootD's XProtocol::mapError does for the same errno.
func TestWriteCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want xrootd.ErrorCode
	}{
		{fmt.Errorf("%w: %w", storage.ErrNoSpace, syscall.ENOSPC), xrootd.CodeNoSpace},
		{syscall.ENOSPC, xrootd.CodeNoSpace}, // from a backend without sentinels
		{fmt.Errorf("%w: %w", storage.ErrOverQuota, syscall.EDQUOT), xrootd.CodeOverQuota},
		{syscall.EDQUOT, xrootd.CodeOverQuota},
		{fmt.Errorf("%w: %w", storage.ErrTooLarge, syscall.EFBIG), xrootd.CodeIOError},
		{fmt.Errorf("%w: %w", storage.ErrOverloaded, syscall.EMFILE), xrootd.CodeOverloaded},
		{syscall.ENFILE, xrootd.CodeOverloaded},
		{fmt.Errorf("%w: %w", storage.ErrReadOnly, syscall.EROFS), xrootd.CodeFSReadOnly},
		{fmt.Errorf("%w: %w", storage.ErrPermission, syscall.EACCES), xrootd.CodeNotAuthorized},
		{fmt.Errorf("%w: %w: %w", storage.ErrBadPath, storage.ErrNameTooLong, syscall.ENAMETOOLONG), xrootd.CodeArgTooLong},
		{storage.ErrBadPath, xrootd.CodeArgInvalid},
		{storage.ErrExist, xrootd.CodeItExists},
		{storage.ErrIsDir, xrootd.CodeIsDirectory},
		{storage.ErrNotDir, xrootd.CodeNotFound},
		{storage.ErrShortWrite, xrootd.CodeIOError},
		{syscall.EIO, xrootd.CodeIOError},
	} {
		if got, _ := codeOf(fmt.Errorf("write \"x\": %w", tc.err)); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}

package posix

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/wanda-fed/wanda/internal/storage"
)

// TestMapErr: the errors of the write path become the sentinels the
// front-ends map to statuses (docs/operations.md, "Status codes of the
// write path"), keeping the errno.
func TestMapErr(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		want  []error
	}{
		{syscall.ENOSPC, []error{storage.ErrNoSpace}},
		{syscall.EDQUOT, []error{storage.ErrOverQuota}},
		{syscall.EFBIG, []error{storage.ErrTooLarge}},
		{syscall.EMFILE, []error{storage.ErrOverloaded}},
		{syscall.ENFILE, []error{storage.ErrOverloaded}},
		{syscall.ENOMEM, []error{storage.ErrOverloaded}},
		{syscall.EROFS, []error{storage.ErrReadOnly}},
		{syscall.EACCES, []error{storage.ErrPermission}},
		{syscall.EPERM, []error{storage.ErrPermission}},
		{syscall.ENAMETOOLONG, []error{storage.ErrBadPath, storage.ErrNameTooLong}},
		{syscall.EEXIST, []error{storage.ErrExist}},
		{syscall.ENOTDIR, []error{storage.ErrNotDir}},
		{syscall.EISDIR, []error{storage.ErrIsDir}},
		{syscall.ENOENT, []error{storage.ErrNotFound}},
		{syscall.ENOTEMPTY, []error{storage.ErrNotEmpty}},
		{syscall.EIO, nil},
	} {
		err := mapErr("write", "a/b", &os.PathError{Op: "write", Path: ".wanda-upload.x", Err: tc.errno})
		for _, w := range tc.want {
			if !errors.Is(err, w) {
				t.Errorf("%v: %v does not wrap %v", tc.errno, err, w)
			}
		}
		if !errors.Is(err, tc.errno) {
			t.Errorf("%v: %v lost the errno", tc.errno, err)
		}
	}
}

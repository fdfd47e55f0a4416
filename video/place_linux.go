package video

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames with RENAME_NOREPLACE, or by a hard link on
// filesystems that do not support it.
func renameNoReplace(tmp, out string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, out, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return linkNoReplace(tmp, out)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: out, Err: err}
	}
	return nil
}

//go:build unix

package serve

import (
	"os"
	"syscall"
)

const syscallNoFollow = syscall.O_NOFOLLOW

// identity is the device and inode of fi.
func identity(fi os.FileInfo) (FileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, false
	}
	return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true
}

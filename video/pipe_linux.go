package video

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe enlarges a pipe's kernel buffer (to 1 MiB, or what
// /proc/sys/fs/pipe-max-size allows) so that frames of several megabytes
// cross it in a few large copies instead of many 64 KiB ones.
func growPipe(f *os.File) {
	for _, n := range []int{1 << 20, 256 << 10} {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, n); err == nil {
			return
		}
	}
}

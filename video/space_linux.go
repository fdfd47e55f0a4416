package video

import "golang.org/x/sys/unix"

// freeSpace is the bytes an unprivileged process may still write on the
// filesystem of dir, and whether it could tell.
func freeSpace(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

//go:build unix

package serve

import (
	"errors"
	"os"
	"syscall"
)

const syscallNoFollow = syscall.O_NOFOLLOW

// tryFlock takes an exclusive lock on f without waiting; errBusy when
// another open file holds one.
func tryFlock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errBusy
		}
		return err
	}
}

// errNoFlock is never returned here (see owner_other.go).
var errNoFlock = errors.New("no flock on this system")

// identity is the device and inode of fi.
func identity(fi os.FileInfo) (FileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, false
	}
	return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true
}

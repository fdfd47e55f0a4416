//go:build unix

package pipeline

import (
	"errors"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on the open directory f without waiting;
// errLocked when another run holds it. The lock goes with f's closing.
func lockDir(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errLocked
		}
		return err
	}
}

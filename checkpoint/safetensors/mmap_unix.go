//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safetensors

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the first size bytes of fd read-only and shared. The mapping
// outlives fd.
func mapFile(fd *os.File, size int) ([]byte, func([]byte) error, error) {
	b, err := unix.Mmap(int(fd.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, unix.Munmap, nil
}

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package safetensors

import (
	"errors"
	"os"
)

// mapFile is not available here; Open reads the file instead.
func mapFile(fd *os.File, size int) ([]byte, func([]byte) error, error) {
	return nil, nil, errors.New("memory mapping not supported on this platform")
}

//go:build !linux

package video

import "os"

// growPipe is a no-op where pipe buffers cannot be resized.
func growPipe(*os.File) {}

//go:build !unix

package flock

import "os"

// TryLock returns ErrUnsupported: this system has no flock.
func TryLock(*os.File) error { return ErrUnsupported }

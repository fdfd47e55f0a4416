// Package flock takes advisory locks on open files, the one way vsr's
// processes tell each other that an output or a directory is in use.
package flock

import "errors"

// ErrBusy says that another open file holds the lock.
var ErrBusy = errors.New("locked by another process")

// ErrUnsupported says that this system has no flock: callers decide what
// running without the lock means for them.
var ErrUnsupported = errors.New("no flock on this system")

package serve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vsr-dev/vsr/internal/flock"
)

// Temporaries and their owners. Several vsr processes may share the input
// and output roots (APIs behind a load balancer, workers on a shared
// filesystem), so a temporary is removed only when its owner is provably
// gone: the owner holds an exclusive lock (flock) for as long as its
// temporaries live, and a sweeper removes them only once it can take that
// lock itself. The kernel drops a dead process's locks, so a crash leaves
// temporaries that the next sweep removes, and a live process's never are.
//
//   - A running task holds ".BASE.vsr-lock" beside its output (BASE the
//     output's name): it covers the hidden files and directories in that
//     directory whose names start with ".BASE." or ".STEM." (STEM: BASE
//     without its extension), with any number of leading dots.
//   - An upload in progress holds a lock on its own file (".upload-*"),
//     from its first byte until its task is stored. A stored upload holds
//     none: its name carries the id of the instance that stored it, which
//     alone sweeps it (see uploads.go).
//
// The lock protocol: the holder creates the lock file, locks it, then
// checks that the name still leads to the file it locked (a sweeper may
// have removed it meanwhile), and removes the name before it unlocks.
// Lock files are opened without following a link and without blocking (a
// FIFO put in their place must not hang a sweep).

// lockSuffix ends the name of a running task's lock file.
const lockSuffix = ".vsr-lock"

// errBusy says that another process holds a lock.
var errBusy = flock.ErrBusy

// errNoFlock: this system has no flock. Owners then run without a lock,
// and sweeps count every temporary as another's: they remove none.
var errNoFlock = flock.ErrUnsupported

// tryFlock takes an exclusive lock on f without waiting; errBusy when
// another open file holds one.
var tryFlock = flock.TryLock

// ownerLock is a held lock on a file.
type ownerLock struct {
	f    *os.File
	path string
}

// lockPath creates (when missing) and locks the file at path, waiting up
// to wait (or until ctx ends) for another holder to let go: it looks again
// after 20 ms, then twice as long each time, up to a second.
func lockPath(ctx context.Context, path string, wait time.Duration) (*ownerLock, error) {
	deadline := time.Now().Add(wait)
	pause := 20 * time.Millisecond
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscallNoFollow|syscall.O_NONBLOCK, 0o600)
		if err != nil {
			return nil, err
		}
		err = tryFlock(f)
		if err == errNoFlock {
			err = nil
		}
		if err == nil && sameFile(f, path) {
			return &ownerLock{f: f, path: path}, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, errBusy) {
			return nil, err
		}
		if err != nil && !time.Now().Before(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(pause, max(time.Until(deadline), time.Millisecond))):
		}
		pause = min(2*pause, time.Second)
	}
}

// tryLockExisting locks the existing file at path without waiting; it
// returns nil when the file is gone or another process holds it.
func tryLockExisting(path string) *ownerLock {
	f, err := os.OpenFile(path, os.O_RDONLY|syscallNoFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	if tryFlock(f) != nil || !sameFile(f, path) {
		f.Close()
		return nil
	}
	return &ownerLock{f: f, path: path}
}

// sameFile reports whether path still names the open file f.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	return err == nil && os.SameFile(a, b)
}

// release removes the lock file's name (when remove is set) and unlocks it.
func (l *ownerLock) release(remove bool) {
	if l == nil {
		return
	}
	if remove && sameFile(l.f, l.path) {
		os.Remove(l.path)
	}
	l.f.Close()
}

// outputLockWait is how long a task waits for another process to let go
// of its output's lock (a sweeper's start, an output another instance
// writes) before it fails; leasedLockWait is how long a worker's task
// waits (see runOne): the holder may be a worker frozen past its lease,
// which stops once it runs again.
var outputLockWait, leasedLockWait = 5 * time.Second, 30 * time.Second

// errOutputBusy says that another process holds an output's lock.
type errOutputBusy struct{ output string }

func (e *errOutputBusy) Error() string {
	return fmt.Sprintf("save_result_path %s is being written by another vsr process sharing the output root: wait for it, or choose another path", e.output)
}

func (e *errOutputBusy) Unwrap() error { return errBusy }

// lockOutput takes the lock of a task writing output (see above), waiting
// up to wait, or until ctx ends, for another holder to let go. shown names
// the output in errors (output may be a path through a descriptor).
func lockOutput(ctx context.Context, output, shown string, wait time.Duration) (*ownerLock, error) {
	p := filepath.Join(filepath.Dir(output), "."+filepath.Base(output)+lockSuffix)
	l, err := lockPath(ctx, p, wait)
	switch {
	case errors.Is(err, errBusy):
		return nil, &errOutputBusy{shown}
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("lock save_result_path %s: %v", shown, unwrapPath(err))
	}
	return l, nil
}

// removeTemporaries removes, under root, the temporaries whose owners are
// gone (see above): those of tasks and uploads interrupted by a crash, but
// the paths in keep (the journals of tasks that will run again).
func removeTemporaries(root string, log *slog.Logger, keep map[string]bool) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if p != root && isTemporary(d.Name()) {
			return fs.SkipDir // swept with its parent
		}
		sweepDir(p, log, keep)
		return nil
	})
}

// sweepDir removes the temporaries in dir whose owners are gone, but the
// paths in keep.
func sweepDir(dir string, log *slog.Logger, keep map[string]bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	// The locks of the tasks that ran here: those still held name the
	// live outputs; those taken here are held until the sweep ends, so
	// that no task starts writing beside them meanwhile.
	var live []string // prefixes of live temporaries (see ownedBy)
	var taken []*ownerLock
	defer func() {
		for _, l := range taken {
			l.release(true)
		}
	}()
	for _, e := range ents {
		base, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "."), lockSuffix)
		if !ok || !strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		if l := tryLockExisting(filepath.Join(dir, e.Name())); l != nil {
			taken = append(taken, l)
			continue
		}
		live = append(live, outputPrefixes(base)...)
	}
	for _, e := range ents {
		n := e.Name()
		if !isTemporary(n) || strings.HasSuffix(n, lockSuffix) {
			continue
		}
		p := filepath.Join(dir, n)
		if strings.HasPrefix(n, ".upload-") {
			if !e.Type().IsRegular() {
				continue
			}
			l := tryLockExisting(p) // an upload in progress holds its file
			if l == nil {
				continue
			}
			if os.Remove(p) == nil {
				log.Info("removed the temporary of an interrupted upload", "path", p)
			}
			l.release(false)
			continue
		}
		if ownedBy(n, live) || keep[p] {
			continue
		}
		if os.RemoveAll(p) == nil {
			log.Info("removed temporaries of an interrupted task", "path", p)
		}
	}
}

// outputPrefixes are the prefixes of the names of the temporaries of an
// output named base (see ownedBy).
func outputPrefixes(base string) []string {
	return []string{base + ".", strings.TrimSuffix(base, filepath.Ext(base)) + "."}
}

// ownedBy reports whether the temporary name, without its leading dots,
// starts with one of prefixes.
func ownedBy(name string, prefixes []string) bool {
	name = strings.TrimLeft(name, ".")
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// createLocked creates a new file in dir (os.CreateTemp's pattern) and
// locks it, so that no sweep removes it while it is open.
func createLocked(dir, pattern string) (*os.File, error) {
	for range 10 {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		if err := tryFlock(f); err != nil && err != errNoFlock {
			f.Close()
			return nil, err
		}
		if sameFile(f, f.Name()) { // not swept between its creation and the lock
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("create a file in %s: it was removed at once, again and again", dir)
}

package serve

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// A worker that takes uploads from the object store (NATS.Files) keeps
// its copies in a directory of its own, DATA/worker-uploads/N, made for
// the process (mode 0700) and locked for as long as it lives (see
// owner.go): it removes only what it made there, never a file of the same
// name in a root it shares. A worker starting on DATA removes the
// directories whose process is gone.
const workerUploads = "worker-uploads"

// privateDir is a process's own directory, locked while it lives.
type privateDir struct {
	path string
	lock *ownerLock
}

// openPrivateDir removes the directories under DATA/worker-uploads whose
// owners are gone, and makes this process's.
func openPrivateDir(data string, log *slog.Logger) (*privateDir, error) {
	base := filepath.Join(data, workerUploads)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("the worker's directory for uploads: %w", err)
	}
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		p := filepath.Join(base, e.Name())
		if l := tryLockExisting(p); l != nil {
			if os.RemoveAll(p) == nil {
				log.Info("removed the uploads of a worker that is gone", "path", p)
			}
			l.release(false)
		}
	}
	for range 10 {
		p, err := os.MkdirTemp(base, "")
		if err != nil {
			return nil, fmt.Errorf("the worker's directory for uploads: %w", err)
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscallNoFollow|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue // swept at once by another worker's start
		}
		if err := tryFlock(f); (err == nil || err == errNoFlock) && sameFile(f, p) {
			return &privateDir{path: p, lock: &ownerLock{f: f, path: p}}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("the worker's directory for uploads in %s: it was removed at once, again and again", base)
}

// close removes the directory and what is in it.
func (d *privateDir) close() {
	if d != nil {
		os.RemoveAll(d.path)
		d.lock.release(false)
	}
}

package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// errUploadBudget refuses an upload that would take the uploads in the
// input root past Config.MaxUploadTotal.
var errUploadBudget = errors.New("upload budget spent")

// uploadBudget counts the bytes of this process's uploads for
// Config.MaxUploadTotal. What is on disk is counted when an upload starts
// (the stored uploads, and the temporaries of other processes' uploads in
// progress); what this process writes meanwhile is counted here as it
// arrives, so that uploads running at once cannot pass the budget together.
type uploadBudget struct {
	mu       sync.Mutex
	inflight int64           // bytes written by this process's uploads in progress
	finished int64           // bytes of this process's uploads kept, ever
	open     map[string]bool // their temporaries' names
}

// budgetWriter writes one upload, within the budget.
type budgetWriter struct {
	b          *uploadBudget
	f          *os.File
	total      int64 // the budget; 0: none
	base       int64 // bytes on disk when the upload started
	finishedAt int64 // b.finished then
	n          int64 // bytes written
}

// writer starts counting the upload written to f, in the input root root,
// against a budget of total bytes (0: no budget).
func (b *uploadBudget) writer(f *os.File, root string, total int64) *budgetWriter {
	w := &budgetWriter{b: b, f: f, total: total}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		b.open = map[string]bool{}
	}
	b.open[filepath.Base(f.Name())] = true
	if total > 0 {
		w.base, w.finishedAt = storedUploads(root, b.open), b.finished
	}
	return w
}

func (w *budgetWriter) Write(p []byte) (int, error) {
	if w.total > 0 {
		w.b.mu.Lock()
		used := w.base + w.b.finished - w.finishedAt + w.b.inflight
		if used+int64(len(p)) > w.total {
			w.b.mu.Unlock()
			return 0, errUploadBudget
		}
		w.b.inflight += int64(len(p))
		w.b.mu.Unlock()
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	if w.total > 0 && n < len(p) {
		w.b.mu.Lock()
		w.b.inflight -= int64(len(p) - n)
		w.b.mu.Unlock()
	}
	return n, err
}

// done ends the upload: kept says whether its file stays (stored).
func (w *budgetWriter) done(kept bool) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	delete(w.b.open, filepath.Base(w.f.Name()))
	if w.total > 0 {
		w.b.inflight -= w.n
	}
	if kept {
		w.b.finished += w.n
	}
}

// storedUploads sums the sizes of the uploads in root: stored ones and
// the temporaries of uploads in progress, but those named in skip.
func storedUploads(root string, skip map[string]bool) int64 {
	ents, _ := os.ReadDir(root)
	var n int64
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || skip[name] || !(uploadName.MatchString(name) || strings.HasPrefix(name, ".upload-")) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// isDiskFull reports whether err says the disk or the quota is full.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/internal/flock"
	"github.com/vsr-dev/vsr/journal"
	"github.com/vsr-dev/vsr/video"
)

// Resume makes a restore resumable (issue 38): the finished segments of a
// run stopped by a crash, a kill or an error are kept in a journal beside
// the output, and the same request run again encodes only the segments
// missing before the join. It applies to a file restored in several
// segments by an engine without causal state (not a model.Planner);
// otherwise it is ignored.
type Resume struct {
	// Model is the caller's hash of the model (weights and code).
	Model string
	// Settings are the caller's settings that change the output, each a
	// key and a canonical value. The input, the frame count, the encoding
	// and the segment plan are added by Restore.
	Settings map[string]string
	// Fresh sets any journal aside and starts over (--no-resume).
	Fresh bool
	// Notice, if set, is told in one line each that a journal was set
	// aside and why, and where the run resumes.
	Notice func(string)
}

// Test hooks: journaled is called after a journal is saved, with the
// number of segments it records (an error fails the run, as an
// interruption would); segmentStarted is called for each segment that is
// decoded and encoded.
var (
	journaled      func(parts int) error
	segmentStarted func(i int)
)

// errLocked: another run holds the journal's lock.
var errLocked = flock.ErrBusy

// lockDir takes an exclusive lock on the open directory f without waiting;
// errLocked when another run holds it. The lock goes with f's closing.
// Where there is no flock it does nothing: one run at a time per output
// is then the user's to ensure.
func lockDir(f *os.File) error {
	if err := flock.TryLock(f); err != flock.ErrUnsupported {
		return err
	}
	return nil
}

// JournalDir names the journal directory of an output: beside it, hidden,
// private, the same for every run.
func JournalDir(out string) string {
	ext := filepath.Ext(out)
	stem := strings.TrimSuffix(filepath.Base(out), ext)
	return filepath.Join(filepath.Dir(out), "."+stem+".vsr-journal")
}

// resumer holds a resumable run's journal.
type resumer struct {
	dir   string
	df    *os.File // the directory, held open; ffmpeg names files through it
	path  string
	store *journal.Store
	j     *journal.Journal
	parts []part
	names []string

	mu      sync.Mutex
	pending map[int]journal.Part // finished, waiting for those before them
}

// openResume opens (making it if need be) the journal of req's output for
// the segment plan parts, and returns it with the number of segments
// already finished.
func openResume(req *Request, info *video.Info, enc video.EncodeOptions, parts []part, total int) (*resumer, error) {
	rs := req.Resume
	notice := func(s string) {
		if rs.Notice != nil {
			rs.Notice(s)
		}
	}
	f, err := os.Open(req.Input)
	if err != nil {
		return nil, err
	}
	pi := *info
	pi.Path = ""
	pb, err := json.Marshal(pi)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("resume: %v", err)
	}
	ps := sha256.Sum256(pb)
	id, err := journal.IdentityOf(f, hex.EncodeToString(ps[:]))
	f.Close()
	if err != nil {
		return nil, err
	}
	values := map[string]string{}
	for k, v := range rs.Settings {
		values["setting:"+k] = v
	}
	eb, err := json.Marshal(enc)
	if err != nil {
		return nil, fmt.Errorf("resume: %v", err)
	}
	values["encode"] = string(eb)
	values["frames"] = fmt.Sprint(total)
	var plan []string
	for _, p := range parts {
		plan = append(plan, fmt.Sprintf("%d+%d", p.start, p.count))
	}
	values["segments"] = strings.Join(plan, ",")
	st, err := journal.NewSettings(rs.Model, values)
	if err != nil {
		return nil, err
	}

	dir := JournalDir(req.Output)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("journal: %v", err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("journal: %v", err)
	} else if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("journal: %s is not a private directory: remove it", dir)
	}
	r := &resumer{dir: dir, parts: parts, pending: map[int]journal.Part{}}
	if r.df, err = os.Open(dir); err != nil {
		return nil, fmt.Errorf("journal: %v", err)
	}
	if err := lockDir(r.df); err != nil {
		r.df.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%s: another run is making this output (its journal %s is locked)", req.Output, dir)
		}
		return nil, fmt.Errorf("journal: locking %s: %v", dir, err)
	}
	r.path = video.FDPath(r.df, dir)
	if r.store, err = journal.Open(dir); err != nil {
		r.df.Close()
		return nil, err
	}
	ext := filepath.Ext(req.Output)
	for i := range parts {
		r.names = append(r.names, fmt.Sprintf("seg%03d%s", i, ext))
	}
	r.j = &journal.Journal{Input: id, Settings: st, TotalFrames: int64(total)}
	l, err := r.store.Load(journal.LoadOptions{VerifyHashes: true})
	switch {
	case errors.Is(err, journal.ErrNoJournal):
		err = nil
	case err != nil:
		notice("journal set aside: " + err.Error())
		err = r.reset()
	case rs.Fresh:
		notice("journal set aside: --no-resume")
		err = r.reset()
	default:
		if ok, why := journal.Compare(l.Journal, id, st); !ok {
			notice("journal set aside: " + why)
			err = r.reset()
		} else {
			r.j = l.Journal
			for i, p := range r.j.Parts { // the plan is in the settings; check it anyway
				if i >= len(parts) || p.File != r.names[i] || p.FirstFrame != int64(parts[i].start) || p.Frames != int64(parts[i].count) {
					r.j.Parts = r.j.Parts[:i]
					break
				}
			}
		}
	}
	if err != nil {
		r.close()
		return nil, err
	}
	if n := len(r.j.Parts); n == len(parts) {
		// Stopped while joining: the last segment runs again, so that
		// its encoder reports what the output carries (colour tags).
		r.j.Parts = r.j.Parts[:n-1]
	}
	if n := len(r.j.Parts); n > 0 {
		notice(fmt.Sprintf("resuming at frame %d of %d", r.j.Done(), total))
	}
	return r, nil
}

// reset empties the journal directory.
func (r *resumer) reset() error {
	if err := r.store.Remove(); err != nil {
		return err
	}
	es, err := os.ReadDir(r.dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := r.store.Root().Remove(e.Name()); err != nil {
			return err
		}
	}
	return nil
}

// done returns the number of segments finished.
func (r *resumer) done() int { return len(r.j.Parts) }

// file names segment i's file for ffmpeg.
func (r *resumer) file(i int) string { return filepath.Join(r.path, r.names[i]) }

// finished records segment i, whose encoder has closed its file, once
// every segment before it is recorded.
func (r *resumer) finished(i int) error {
	name := r.names[i]
	f, err := r.store.Root().Open(name)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	size, sum, err := r.store.FileSum(name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.parts[i]
	r.pending[i] = journal.Part{Index: i, FirstFrame: int64(p.start), Frames: int64(p.count), File: name, Size: size, SHA256: sum}
	saved := false
	for {
		q, ok := r.pending[len(r.j.Parts)]
		if !ok {
			break
		}
		delete(r.pending, q.Index)
		r.j.Parts = append(r.j.Parts, q)
		saved = true
	}
	if !saved {
		return nil
	}
	if err := r.store.Save(r.j); err != nil {
		return err
	}
	if journaled != nil {
		return journaled(len(r.j.Parts))
	}
	return nil
}

func (r *resumer) close() {
	r.store.Close()
	r.df.Close()
}

// remove deletes the journal directory: the output is done.
func (r *resumer) remove() {
	r.close()
	os.RemoveAll(r.dir)
}

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/internal/flock"
	"github.com/vsr-dev/vsr/journal"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// Resume makes a restore resumable (issue 38): the output is made of parts
// of about Request.CheckpointEvery seconds of video, each recorded in a
// journal beside the output once its encoder has closed it, and the same
// request run again after a crash, a kill or an error restores only the
// parts after the last recorded one, then joins them all. A causal engine
// (a model.Planner) is resumable only if it is a model.Resumer: its state
// is saved after a batch at each part boundary, into the journal once
// every frame before the boundary is in recorded parts, and a rerun loads
// it into the new session and goes on from there (a state the engine
// refuses sets the journal aside, with a notice). Resume is ignored for a
// Planner without it or whose state can be saved after no batch of the
// video, for an output that keeps variable frame times or takes its alpha
// from the input, and for an output of one part (a video shorter than
// CheckpointEvery restored in one segment). An error in the
// input itself while its frames are read (the decoder fails, the input
// ends early) discards the journal; any other error (a decoder that cannot
// start included), and a cancellation, keeps it.
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
	// Resumed, if set, is told the frame the run resumes at, before the
	// first frame after it is restored (Result.ResumedFrom says it again
	// at the end).
	Resumed func(frame int)
	// Kept, if set, is told when a run that fails or is stopped keeps
	// finished parts in the journal (JournalDir of the output) for the
	// same request to resume from: the frames they hold. It is not told
	// when nothing was kept (no part finished, a journal refused or held
	// by another run, an input that failed).
	Kept func(frames int)
}

// Test hooks: journaled is called after a journal is saved, with what it
// records (an error fails the run, as an interruption would); partStarted
// is called for each part whose encoder is opened.
var (
	journaled   func(j *journal.Journal) error
	partStarted func(i int)
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
	// notice is Resume.Notice, or does nothing.
	notice func(string)

	mu      sync.Mutex
	pending map[int]journal.Part // finished, waiting for those before them
	states  []savedState         // states saved, not yet in the journal, in order
	writing time.Duration        // in writing state files
}

// spent is the time spent writing state files.
func (r *resumer) spent() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writing
}

// savedState is a causal engine's state after checkpoint n, at output
// frame frame.
type savedState struct {
	n, frame int
	data     []byte
}

// stateFile names the file of the state after checkpoint n.
func stateFile(n int) string { return fmt.Sprintf("state-%04d.bin", n) }

// openResume opens (making it if need be) the journal of req's output for
// the part plan parts, and returns it with the parts already finished
// (done). For a causal engine rsm (nil for one without state), cps are
// its checkpoints: the parts kept are those before the journal's state,
// which is loaded into rsm, and from is its checkpoint (the zero
// checkpoint when the run starts from frame 0: then done is 0). A state
// that rsm refuses (one of another shape: settings that the journal's do
// not tell apart) sets the journal aside, as a changed setting does.
func openResume(req *Request, info *video.Info, enc video.EncodeOptions, parts []part, total int, cps []checkpoint, rsm model.Resumer) (r *resumer, from checkpoint, err error) {
	r, err = openJournal(req, info, enc, parts, total, cps)
	if err != nil {
		return nil, checkpoint{}, err
	}
	if rsm != nil {
		if from, err = r.load(cps, rsm); err != nil {
			r.notice("journal set aside: the model cannot resume from its saved state (" + err.Error() + ")")
			from = checkpoint{}
			if err = r.reset(); err != nil {
				r.close()
				return nil, checkpoint{}, err
			}
		}
	}
	if n := r.j.Done(); n > 0 {
		r.notice(fmt.Sprintf("resuming at frame %d of %d", n, total))
		if req.Resume.Resumed != nil {
			req.Resume.Resumed(int(n))
		}
	}
	return r, from, nil
}

// openJournal is openResume but for the state: it opens the journal and
// keeps the parts finished before its state.
func openJournal(req *Request, info *video.Info, enc video.EncodeOptions, parts []part, total int, cps []checkpoint) (*resumer, error) {
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
	every := req.CheckpointEvery
	if every <= 0 {
		every = DefaultCheckpointEvery
	}
	values["checkpoint_every"] = strconv.FormatFloat(every, 'g', -1, 64)
	var plan []string
	for _, p := range parts {
		plan = append(plan, fmt.Sprintf("%d+%d", p.start, p.count))
	}
	values["parts"] = strings.Join(plan, ",")
	if cps != nil {
		var cs []string
		for _, c := range cps {
			cs = append(cs, fmt.Sprintf("%d:%d:%d", c.batch, c.in, c.out))
		}
		values["checkpoints"] = strings.Join(cs, ",")
	}
	st, err := journal.NewSettings(rs.Model, values)
	if err != nil {
		return nil, err
	}

	dir := JournalDir(req.Output)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("journal: %v", err)
	}
	r := &resumer{dir: dir, parts: parts, pending: map[int]journal.Part{}, notice: notice}
	if r.df, err = openPrivateDir(dir); err != nil {
		return nil, err
	}
	if err := lockDir(r.df); err != nil {
		r.df.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%s: another run is making this output (its journal %s is locked)", req.Output, dir)
		}
		return nil, fmt.Errorf("journal: locking %s: %v", dir, err)
	}
	r.path = video.FDPath(r.df, dir) // the directory opened, whatever dir names now
	if r.store, err = journal.Open(r.path); err != nil {
		r.df.Close()
		return nil, err
	}
	ext := filepath.Ext(req.Output)
	for i := range parts {
		r.names = append(r.names, fmt.Sprintf("part%04d%s", i, ext))
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
			break
		}
		for _, n := range l.Notes {
			notice("journal: " + n)
		}
		r.j = l.Journal
		for i, p := range r.j.Parts { // the plan is in the settings; check it anyway
			if i >= len(parts) || p.File != r.names[i] || p.FirstFrame != int64(parts[i].start) || p.Frames != int64(parts[i].count) {
				r.j.Parts = r.j.Parts[:i]
				break
			}
		}
		if n := len(r.j.Parts); n == len(parts) {
			// Stopped while joining: the last part runs again, so that
			// its encoder reports what the output carries (colour tags).
			r.j.Parts = r.j.Parts[:n-1]
		}
		if cps != nil && len(r.j.Parts) > 0 {
			err = r.keepToState(cps)
		}
	}
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// keepToState keeps, for a causal engine with checkpoints cps, the parts
// up to the journal's state, which must be at one of cps; without a usable
// state the journal is set aside.
func (r *resumer) keepToState(cps []checkpoint) error {
	if s := r.j.State; s != nil && slices.ContainsFunc(cps, func(c checkpoint) bool { return int64(c.out) == s.Frame }) {
		for len(r.j.Parts) > 0 && r.j.Done() > s.Frame {
			r.j.Parts = r.j.Parts[:len(r.j.Parts)-1]
		}
		if r.j.Done() == s.Frame {
			return nil
		}
	}
	r.notice("journal set aside: it holds no usable state of the model to resume from")
	return r.reset()
}

// load loads the journal's state into rsm and returns its checkpoint of
// cps (the zero checkpoint when there are no parts to resume after); an
// error when the state cannot be read or rsm refuses it.
func (r *resumer) load(cps []checkpoint, rsm model.Resumer) (checkpoint, error) {
	if len(r.j.Parts) == 0 || r.j.State == nil {
		return checkpoint{}, nil
	}
	i := slices.IndexFunc(cps, func(c checkpoint) bool { return int64(c.out) == r.j.State.Frame })
	if i < 0 || r.j.Done() != r.j.State.Frame {
		return checkpoint{}, fmt.Errorf("the state at frame %d is at no checkpoint", r.j.State.Frame)
	}
	f, err := r.store.Root().Open(r.j.State.File)
	if err != nil {
		return checkpoint{}, err
	}
	defer f.Close()
	if err := rsm.LoadState(f); err != nil {
		return checkpoint{}, err
	}
	return cps[i], nil
}

// openPrivateDir opens the journal directory dir, which must be a
// directory (not a symbolic link) that only its owner can reach. What is
// checked is what was opened: a name swapped for a link or another
// directory between the check and the open is refused.
func openPrivateDir(dir string) (*os.File, error) {
	bad := fmt.Errorf("journal: %s is not a private directory: remove it", dir)
	named, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %v", err)
	}
	if !named.IsDir() {
		return nil, bad
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %v", err)
	}
	opened, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: %v", err)
	}
	if !opened.IsDir() || opened.Mode().Perm()&0o077 != 0 || !os.SameFile(named, opened) {
		f.Close()
		return nil, bad
	}
	return f, nil
}

// reset empties the journal directory.
func (r *resumer) reset() error {
	r.j.Parts, r.j.State = nil, nil
	if err := r.store.Remove(); err != nil {
		return err
	}
	es, err := os.ReadDir(r.path)
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

// done returns the number of parts finished.
func (r *resumer) done() int { return len(r.j.Parts) }

// file names part i's file for ffmpeg.
func (r *resumer) file(i int) string { return filepath.Join(r.path, r.names[i]) }

// finished records part i, whose encoder has closed its file, once every
// part before it is recorded.
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
	return r.commit()
}

// saved takes the state of a causal engine after checkpoint n, whose
// batches gave frame output frames: it goes into the journal once those
// frames are all in recorded parts.
func (r *resumer) saved(n, frame int, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, savedState{n: n, frame: frame, data: data})
	if int64(frame) > r.j.Done() {
		return nil
	}
	return r.commit()
}

// commit writes the last state waiting whose frames before it are all in
// the parts recorded (dropping those before it), and saves the journal; then it removes the state files that
// neither this journal nor the one before it names. r.mu is held.
func (r *resumer) commit() error {
	keep := map[string]bool{}
	if old := r.j.State; old != nil {
		keep[old.File] = true
	}
	k := 0
	for k < len(r.states) && int64(r.states[k].frame) <= r.j.Done() {
		k++
	}
	if k > 0 {
		s := r.states[k-1]
		name := stateFile(s.n)
		t := time.Now()
		if err := r.writeState(name, s.data); err != nil {
			return err
		}
		sum := sha256.Sum256(s.data)
		r.writing += time.Since(t)
		r.j.State = &journal.State{File: name, Size: int64(len(s.data)), SHA256: hex.EncodeToString(sum[:]), Frame: int64(s.frame)}
		r.states = r.states[k:]
	}
	if err := r.store.Save(r.j); err != nil {
		return err
	}
	if r.j.State != nil {
		keep[r.j.State.File] = true
		if names, err := fs.Glob(r.store.Root().FS(), "state-*.bin"); err == nil {
			for _, n := range names {
				if !keep[n] {
					r.store.Root().Remove(n)
				}
			}
		}
	}
	if journaled != nil {
		return journaled(r.j)
	}
	return nil
}

// writeState writes and syncs a state file in the journal's directory.
func (r *resumer) writeState(name string, data []byte) error {
	f, err := r.store.Root().OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %v", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: writing the model's state: %v", err)
	}
	return nil
}

func (r *resumer) close() {
	r.store.Close()
	r.df.Close()
}

// remove deletes the journal directory: the output is done. It is emptied
// through the directory opened while the lock is held, and removed by name
// only if the name still is that directory.
func (r *resumer) remove() {
	if es, err := os.ReadDir(r.path); err == nil {
		for _, e := range es {
			r.store.Root().RemoveAll(e.Name())
		}
	}
	if named, err := os.Lstat(r.dir); err == nil {
		if opened, err := r.df.Stat(); err == nil && os.SameFile(named, opened) {
			os.Remove(r.dir)
		}
	}
	r.close()
}

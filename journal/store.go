package journal

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
)

// The store's file names.
const (
	FileName = "journal.json"
	PrevName = "journal.prev.json"
	tmpInfix = ".tmp-"
)

// maxJournalSize bounds what Load reads of a journal file.
const maxJournalSize = 64 << 20

// ErrNoJournal is returned (wrapped) by [Store.Load] when the directory holds
// neither journal file: there is nothing to resume.
var ErrNoJournal = errors.New("journal: no journal")

// ErrDamaged is returned (wrapped) by [Store.Load] when a journal file is
// present but neither it nor the previous one can be used.
var ErrDamaged = errors.New("journal: damaged")

// tmpFile is what Save writes a checkpoint through; *os.File is one.
type tmpFile interface {
	io.Writer
	Sync() error
	Close() error
}

// Store keeps the journal of one output in one directory. See the package
// documentation for the files and the guarantees.
type Store struct {
	root    *os.Root
	own     bool   // Close closes root
	lastSeq uint64 // highest Seq seen

	// create opens a new temporary file for writing; tests replace it to
	// simulate a full disk.
	create func(name string) (tmpFile, error)
}

// Open opens the store in directory dir, which must exist, through
// [os.OpenRoot]. Close releases it.
func Open(dir string) (*Store, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	s := New(r)
	s.own = true
	return s, nil
}

// New returns a store in the directory root refers to. The caller keeps
// ownership of root: Close does not close it.
func New(root *os.Root) *Store {
	s := &Store{root: root}
	s.create = func(name string) (tmpFile, error) {
		return root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	return s
}

// Root returns the store's directory, for the caller to write part and state
// files into.
func (s *Store) Root() *os.Root { return s.root }

// Close releases the directory if [Open] opened it.
func (s *Store) Close() error {
	if s.own {
		return s.root.Close()
	}
	return nil
}

// Save writes j as the new checkpoint. It sets j.Version when 0 and j.Seq to
// one more than the highest sequence number seen in the store, validates j,
// writes it to a temporary file, syncs it, keeps the current journal (if it
// verifies) as journal.prev.json, renames the new one to journal.json, syncs
// the directory and removes temporary files an earlier crash left. Save does
// not check the part files: the caller writes and syncs (f.Sync) a part or
// state file in the store's directory before it saves a journal that lists
// it; the directory sync of that Save makes the new file's name durable too.
//
// If Save fails, the last good checkpoint is still what [Store.Load] finds
// (as journal.json or, after a failure between the renames, as
// journal.prev.json), and no temporary file is left behind. j.Seq may have
// been advanced even so.
func (s *Store) Save(j *Journal) error {
	if j.Version == 0 {
		j.Version = Version
	}
	cur, curErr := s.readFile(FileName)
	if curErr == nil && cur.Seq > s.lastSeq {
		s.lastSeq = cur.Seq
	}
	if prev, err := s.readFile(PrevName); err == nil && prev.Seq > s.lastSeq {
		s.lastSeq = prev.Seq
	}
	j.Seq = s.lastSeq + 1
	if err := j.Validate(); err != nil {
		return fmt.Errorf("journal: save: %w", err)
	}
	data, err := encode(j)
	if err != nil {
		return err
	}
	tmp := FileName + tmpInfix + rand.Text()[:12]
	if err := s.writeTemp(tmp, data); err != nil {
		s.root.Remove(tmp)
		return fmt.Errorf("journal: save: %w", err)
	}
	if curErr == nil {
		// journal.json is good: it becomes the previous checkpoint. A damaged
		// one is simply replaced, so that it never displaces a good prev.
		if err := s.root.Rename(FileName, PrevName); err != nil {
			s.root.Remove(tmp)
			return fmt.Errorf("journal: save: %w", err)
		}
	}
	if err := s.root.Rename(tmp, FileName); err != nil {
		s.root.Remove(tmp)
		return fmt.Errorf("journal: save: %w", err)
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("journal: save: %w", err)
	}
	s.lastSeq = j.Seq
	s.removeStale()
	return nil
}

// removeStale removes temporary files that a crash during an earlier Save
// left behind. It is best-effort: a file it cannot list or remove stays.
func (s *Store) removeStale() error {
	d, err := s.root.Open(".")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	var errs []error
	for _, n := range names {
		if strings.HasPrefix(n, FileName+tmpInfix) {
			if err := s.root.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(append(errs, err)...)
}

func (s *Store) writeTemp(name string, data []byte) error {
	f, err := s.create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (s *Store) syncDir() error {
	d, err := s.root.Open(".")
	if err != nil {
		return err
	}
	err = d.Sync()
	d.Close()
	if runtime.GOOS == "windows" {
		return nil // directories cannot be synced there
	}
	return err
}

// openRegular opens name in the store for reading if it is a regular file,
// not a symbolic link (even one within the directory), and checks that what
// it opened is what it looked at.
func (s *Store) openRegular(name string) (*os.File, fs.FileInfo, error) {
	li, err := s.root.Lstat(name)
	if err != nil {
		return nil, nil, err
	}
	if !li.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is not a regular file (%v)", name, li.Mode().Type())
	}
	f, err := s.root.Open(name)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !os.SameFile(li, fi) {
		f.Close()
		return nil, nil, fmt.Errorf("%s changed while it was opened", name)
	}
	return f, fi, nil
}

// readFile reads and decodes one journal file.
func (s *Store) readFile(name string) (*Journal, error) {
	f, _, err := s.openRegular(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJournalSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxJournalSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxJournalSize)
	}
	return decode(data)
}

// LoadOptions tune [Store.Load].
type LoadOptions struct {
	// VerifyHashes makes Load hash every part and state file and compare it
	// with the journal, rather than only check that it exists with the size
	// stated.
	VerifyHashes bool
}

// Loaded is what [Store.Load] found.
type Loaded struct {
	// Journal is the usable journal, its parts truncated to those whose
	// files are intact and its state dropped if unusable.
	Journal *Journal
	// FromPrevious is true when journal.json was unusable and the previous
	// checkpoint was taken; Notes then say why.
	FromPrevious bool
	// Notes say, one line each, what Load set aside: a damaged journal.json,
	// the parts cut off, a dropped state.
	Notes []string
}

// Load returns the last usable checkpoint: journal.json if it verifies
// (envelope, checksum, version, consistent record), else journal.prev.json.
// It then checks the parts in order; the first whose file is missing, not a
// regular file, of another size or (with VerifyHashes) of another SHA-256
// truncates the journal to the parts before it. The state is dropped if its
// file fails the same checks or it lies beyond the parts kept (its frame
// after [Journal.Done]).
//
// Load fails with [ErrNoJournal] when neither file exists, and with
// [ErrDamaged] (the error says why for each file) when neither is usable.
// Load changes nothing on disk.
func (s *Store) Load(opt LoadOptions) (*Loaded, error) {
	out := &Loaded{}
	j, errCur := s.readFile(FileName)
	if errCur != nil {
		var errPrev error
		j, errPrev = s.readFile(PrevName)
		if errPrev != nil {
			if errors.Is(errCur, fs.ErrNotExist) && errors.Is(errPrev, fs.ErrNotExist) {
				return nil, ErrNoJournal
			}
			return nil, fmt.Errorf("%w: %s: %v; %s: %v", ErrDamaged, FileName, errCur, PrevName, errPrev)
		}
		out.FromPrevious = true
		out.Notes = append(out.Notes, fmt.Sprintf("%s unusable (%v): took the previous checkpoint", FileName, errCur))
	}
	if j.Seq > s.lastSeq {
		s.lastSeq = j.Seq
	}
	for i, p := range j.Parts {
		if err := s.checkFile(p.File, p.Size, p.SHA256, opt.VerifyHashes); err != nil {
			out.Notes = append(out.Notes, fmt.Sprintf("part %d (%s) %v: kept the %d parts before it, %d frames", i, p.File, err, i, p.FirstFrame))
			j.Parts = j.Parts[:i:i]
			break
		}
	}
	if st := j.State; st != nil {
		if st.Frame > j.Done() {
			out.Notes = append(out.Notes, fmt.Sprintf("state at frame %d lies beyond the %d frames kept: dropped", st.Frame, j.Done()))
			j.State = nil
		} else if err := s.checkFile(st.File, st.Size, st.SHA256, opt.VerifyHashes); err != nil {
			out.Notes = append(out.Notes, fmt.Sprintf("state (%s) %v: dropped", st.File, err))
			j.State = nil
		}
	}
	out.Journal = j
	return out, nil
}

// checkFile checks that name is a regular file of the size stated and, with
// verify, of the SHA-256 stated.
func (s *Store) checkFile(name string, size int64, sum string, verify bool) error {
	f, fi, err := s.openRegular(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errors.New("is missing")
		}
		return fmt.Errorf("is unusable: %v", err)
	}
	defer f.Close()
	if fi.Size() != size {
		return fmt.Errorf("has %d bytes, not %d", fi.Size(), size)
	}
	if !verify {
		return nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("cannot be read: %v", err)
	}
	if hex.EncodeToString(h.Sum(nil)) != sum {
		return errors.New("has another SHA-256")
	}
	return nil
}

// Remove deletes the journal files and any temporary ones (not the parts:
// the caller removes the directory when the output is done or the run is
// cancelled). Missing files are not an error.
func (s *Store) Remove() error {
	errs := []error{s.removeStale()}
	for _, n := range []string{FileName, PrevName} {
		if err := s.root.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FileSum returns the size and SHA-256 (hex) of the regular file name in the
// store's directory, as a [Part] or [State] records them. The caller syncs
// the file before it saves a journal that lists it.
func (s *Store) FileSum(name string) (size int64, sum string, err error) {
	if err := checkName(name); err != nil {
		return 0, "", fmt.Errorf("journal: %w", err)
	}
	f, _, err := s.openRegular(name)
	if err != nil {
		return 0, "", fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("journal: %w", err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

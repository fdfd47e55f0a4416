package video

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// ErrExists is returned (wrapped) by Encoder.Close and Concat when the
// output exists and the options say not to replace it.
var ErrExists = errors.New("the output file exists")

// RenameNoReplace renames tmp to out as one atomic step, failing with
// ErrExists (wrapped) when out exists, whoever put it there.
func RenameNoReplace(tmp, out string) error { return moveIntoPlace(tmp, out, true) }

// moveIntoPlace renames the finished temporary tmp onto out; with
// noReplace it fails with ErrExists instead of replacing a file there, as
// one atomic step.
func moveIntoPlace(tmp, out string, noReplace bool) error {
	if !noReplace {
		return os.Rename(tmp, out)
	}
	err := renameNoReplace(tmp, out)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s", ErrExists, out)
	}
	return err
}

// linkNoReplace is the portable no-replace rename: a hard link fails when
// the name exists.
func linkNoReplace(tmp, out string) error {
	if err := os.Link(tmp, out); err != nil {
		return err
	}
	return os.Remove(tmp)
}

// selfFD is the prefix of a path through a descriptor this process holds
// open (an input file or an output directory opened and verified by the
// caller). A child process has its own /proc/self, so ChildPath names the
// same open file through this process's id instead.
const selfFD = "/proc/self/fd/"

// FDPath names the open file f through its descriptor on Linux
// (/proc/self/fd/N), so that a later open of the path, by this process or
// (through ChildPath) an ffmpeg child, reaches that very file or directory
// and not whatever its name points to by then. Elsewhere it is name.
func FDPath(f *os.File, name string) string {
	if runtime.GOOS != "linux" {
		return name
	}
	return selfFD + strconv.Itoa(int(f.Fd()))
}

// ChildPath returns p as a child process (ffmpeg) must name it: a path
// under /proc/self/fd (or /dev/fd, or /dev/stdin) becomes /proc/PID/fd,
// which reaches the very file or directory this process has open, whatever
// its name now points to (and not the child's own stdin); other paths are
// returned as they are.
func ChildPath(p string) string {
	switch {
	case p == "/dev/stdin":
		p = selfFD + "0"
	case strings.HasPrefix(p, "/dev/fd/"):
		p = selfFD + strings.TrimPrefix(p, "/dev/fd/")
	}
	if rest, ok := strings.CutPrefix(p, selfFD); ok {
		return "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + rest
	}
	return p
}

// Workdir is a private directory (mode 0700) beside an output, where its
// temporaries are written: another user cannot put a link in place of a
// temporary's name, and on Linux the directory is named through a
// descriptor held open, so that a swap of its own name does not redirect
// the writes either. Remove deletes it with what is left in it.
type Workdir struct {
	name string   // as created
	f    *os.File // held open while in use
	path string   // how the files in it are named: /proc/self/fd/N on Linux
}

// NewWorkdir checks the output location (its directory exists and is
// writable; the output is not a directory) and makes a Workdir beside it,
// named ".STEM.vsr-*".
func NewWorkdir(outPath string) (*Workdir, error) {
	dir, ext := filepath.Dir(outPath), filepath.Ext(outPath)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("output directory %q does not exist: create it first", dir)
	case err != nil:
		return nil, fmt.Errorf("output directory %q: %v", dir, err)
	case !st.IsDir():
		return nil, fmt.Errorf("output directory %q is not a directory: choose another output path", dir)
	}
	if st, err := os.Stat(outPath); err == nil && st.IsDir() {
		return nil, fmt.Errorf("output %q is a directory: give a file name such as %s", outPath, filepath.Join(outPath, "out"+ext))
	}
	stem := strings.TrimSuffix(filepath.Base(outPath), ext)
	name, err := os.MkdirTemp(dir, "."+stem+".vsr-*")
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("output directory %q is not writable: fix its permissions or choose another directory", dir)
		}
		return nil, fmt.Errorf("output directory %q is not writable (%v): choose another directory", dir, err)
	}
	f, err := os.Open(name)
	if err != nil {
		os.Remove(name)
		return nil, fmt.Errorf("output directory %q: %v", dir, err)
	}
	return &Workdir{name: name, f: f, path: FDPath(f, name)}, nil
}

// Path names the file name inside the Workdir.
func (w *Workdir) Path(name string) string { return filepath.Join(w.path, name) }

// Remove deletes the Workdir and what is in it. It may be called more
// than once.
func (w *Workdir) Remove() {
	if w.f != nil {
		os.RemoveAll(w.name)
		w.f.Close()
		w.f = nil
	}
}

// reserveTemp makes the Workdir of an output and names the temporary file
// ffmpeg is to write in it: the output's name, so the same muxer is used.
func reserveTemp(outPath, ext string) (*Workdir, string, error) {
	w, err := NewWorkdir(outPath)
	if err != nil {
		return nil, "", err
	}
	return w, w.Path(filepath.Base(outPath)), nil
}

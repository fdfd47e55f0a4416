package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/vsr-dev/vsr/video"
)

// pathError is a path refused with an HTTP status (400 or 403).
type pathError struct {
	code int
	msg  string
}

func (e *pathError) Error() string { return e.msg }

func forbidden(format string, args ...any) error {
	return &pathError{403, fmt.Sprintf(format, args...)}
}

func badPath(format string, args ...any) error {
	return &pathError{400, fmt.Sprintf(format, args...)}
}

// within reports whether p (clean, absolute) is root or inside it.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// under joins a client path to root (relative paths) or takes it as is
// (absolute ones), cleaned.
func under(root, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(root, p)
}

// resolveInput returns the real path of the video at p, which must be a
// regular file inside root once symlinks are followed.
func resolveInput(root, p string) (string, error) {
	if p == "" {
		return "", badPath("video_path: required")
	}
	abs := under(root, p)
	if !within(root, abs) {
		return "", forbidden("video_path %q is outside the input root", p)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", badPath("video_path %q does not exist", p)
		}
		return "", badPath("video_path %q: %v", p, errors.Unwrap(err))
	}
	if !within(root, real) {
		return "", forbidden("video_path %q resolves outside the input root", p)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", badPath("video_path %q: %v", p, err)
	}
	if !st.Mode().IsRegular() {
		return "", badPath("video_path %q is not a regular file", p)
	}
	return real, nil
}

// maxName and maxPath bound an output's file name and path: the
// temporaries beside it add about 30 bytes to the name, and Linux takes
// 255 bytes a name and 4096 a path.
const (
	maxName = 200
	maxPath = 4000
)

// resolveOutput returns where a task's result goes: p inside root (its
// directory must exist and be inside root once symlinks are followed), or
// TASKID.mp4 in root when p is empty. A name without an extension gets
// ".mp4", as LightX2V adds its suffix.
func resolveOutput(root, p, id string) (string, error) {
	if p == "" {
		p = id
	}
	if strings.HasSuffix(p, "/") {
		return "", badPath("save_result_path %q names a directory", p)
	}
	if filepath.Ext(p) == "" {
		p += ".mp4"
	}
	abs := under(root, p)
	if !within(root, abs) || abs == root {
		return "", forbidden("save_result_path %q is outside the output root", p)
	}
	name := filepath.Base(abs)
	if len(name) > maxName {
		return "", badPath("save_result_path: the file name is %d bytes long; at most %d", len(name), maxName)
	}
	if len(abs) > maxPath {
		return "", badPath("save_result_path: the path is %d bytes long; at most %d", len(abs), maxPath)
	}
	if strings.HasPrefix(name, ".") {
		return "", badPath("save_result_path %q: hidden names are reserved for temporary files", p)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", badPath("save_result_path %q: its directory does not exist", p)
		}
		return "", badPath("save_result_path %q: %v", p, errors.Unwrap(err))
	}
	if !within(root, dir) {
		return "", forbidden("save_result_path %q resolves outside the output root", p)
	}
	out := filepath.Join(dir, name)
	if st, err := os.Lstat(out); err == nil && st.IsDir() {
		return "", badPath("save_result_path %q is a directory", p)
	}
	return out, nil
}

// taskFiles are a task's input file and output directory, opened inside
// their roots when the task runs. The runner reads and writes through
// them, so what was verified is what is used, whatever the names point to
// by then.
type taskFiles struct {
	in, dir *os.File
	out     *os.Root          // dir, for the task's own temporaries
	names   *strings.Replacer // descriptor paths back to the names, for messages
}

func (f *taskFiles) close() {
	f.in.Close()
	f.dir.Close()
	f.out.Close()
}

// openRootOf opens root, and returns it with p (a path inside it) made
// relative to it.
func openRootOf(root, p string) (*os.Root, string, error) {
	rel, err := filepath.Rel(root, p)
	if err != nil || !within(root, p) {
		return nil, "", fmt.Errorf("%s is not inside %s", p, root)
	}
	r, err := os.OpenRoot(root)
	return r, rel, err
}

// openIn opens rel (a path inside root, symlinks followed only while they
// stay inside) with os.Root, which refuses any escape as it walks.
func openIn(root, p string) (*os.File, error) {
	r, rel, err := openRootOf(root, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// Non-blocking: a FIFO put in place of a file must not hang the open
	// (the caller then refuses what is not a regular file or directory).
	return r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// openDirIn opens the directory p inside root as openIn does, as an
// os.Root and as a file of that same directory.
func openDirIn(root, p string) (*os.Root, *os.File, error) {
	r, rel, err := openRootOf(root, p)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	d, err := r.OpenRoot(rel) // a directory only
	if err != nil {
		return nil, nil, err
	}
	f, err := d.OpenFile(".", os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, f, nil
}

// openTask opens t's input and its output's directory inside the roots,
// as they are when the task runs (a link changed since the task was
// queued cannot lead out of a root), and returns the runner's copy of t,
// whose Input and Output name the opened file and directory.
func (s *Service) openTask(t *Task) (*Task, *taskFiles, error) {
	inRoot := s.cfg.InputRoot
	if s.copies != nil && within(s.copies.path, t.Input) { // a worker's copy of an upload
		inRoot = s.copies.path
	}
	in, err := openIn(inRoot, t.Input)
	if err != nil {
		return nil, nil, fmt.Errorf("video_path %s cannot be opened inside the input root (%v): it was removed, made unreadable, or replaced by a link out of the root after the task was queued", t.Input, unwrapPath(err))
	}
	st, err := in.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	if err != nil {
		in.Close()
		return nil, nil, fmt.Errorf("video_path %s: %v", t.Input, err)
	}
	dirName := filepath.Dir(t.Output)
	out, dir, err := openDirIn(s.cfg.OutputRoot, dirName)
	if err != nil {
		in.Close()
		return nil, nil, fmt.Errorf("the directory of save_result_path %s cannot be opened inside the output root (%v): it was removed, made unreadable, or replaced by a link out of the root after the task was queued", t.Output, unwrapPath(err))
	}
	f := &taskFiles{in: in, dir: dir, out: out}
	w := t.clone()
	w.Input = video.FDPath(in, t.Input)
	dirPath := video.FDPath(dir, dirName)
	w.Output = filepath.Join(dirPath, filepath.Base(t.Output))
	// Messages name the files as the client does: the descriptor paths,
	// as vsr and its ffmpeg children see them, become the names again.
	type pair struct{ fd, name string }
	var ps []pair
	if w.Input != t.Input {
		ps = []pair{{dirPath, dirName}, {w.Input, t.Input}, {video.ChildPath(dirPath), dirName}, {video.ChildPath(w.Input), t.Input}}
	}
	// Longest first: the path of fd 12 is a prefix of that of fd 123.
	slices.SortFunc(ps, func(a, b pair) int { return len(b.fd) - len(a.fd) })
	var pairs []string
	for _, p := range ps {
		pairs = append(pairs, p.fd, p.name)
	}
	f.names = strings.NewReplacer(pairs...)
	return w, f, nil
}

// unwrapPath drops the operation and path of an *fs.PathError, which name
// the relative path os.Root walked.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

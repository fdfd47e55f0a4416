package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

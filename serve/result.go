package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/vsr-dev/vsr/video"
)

// A task's result is written under a hidden name beside its output
// (resultTemp), then put in place by the service (placeResult), which
// first records the identity of the file it is about to rename in
// (Task.Wrote). A run after a crash may then tell its own earlier result
// from a file someone else put at the output path: it replaces only its
// own, or any file when the request says "overwrite".

// FileID identifies a file on its filesystem (device and inode).
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// resultTemp is the hidden name the runner writes output's result to: in
// the same directory, with the same extension (which picks the format).
func resultTemp(output string) string {
	base := filepath.Base(output)
	return filepath.Join(filepath.Dir(output), "."+base+".vsr-result"+filepath.Ext(base))
}

// resultID returns the identity of the result the runner wrote at tmp.
func resultID(tmp string) (FileID, error) {
	fi, err := os.Lstat(tmp)
	if err != nil {
		return FileID{}, fmt.Errorf("the runner reported success but left no result: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return FileID{}, errors.New("the runner's result is not a regular file")
	}
	id, _ := identity(fi)
	return id, nil
}

// placeResult renames the result tmp to output. An existing file at
// output is replaced only when replace is set or its identity is among
// ours (results of earlier runs of this task); otherwise the result is
// removed and the error wraps video.ErrExists. name is output as the
// client knows it, for messages.
func placeResult(tmp, output, name string, replace bool, ours []FileID) error {
	if !replace {
		if fi, err := os.Lstat(output); err == nil {
			id, ok := identity(fi)
			replace = ok && slices.Contains(ours, id)
		}
	}
	if replace {
		return os.Rename(tmp, output)
	}
	exists := func() error {
		os.Remove(tmp)
		return fmt.Errorf("save_result_path %s exists and this task did not write it: %w; remove it, or submit again with \"overwrite\": true", name, video.ErrExists)
	}
	// A link fails when output exists, whoever put it there meanwhile.
	err := os.Link(tmp, output)
	switch {
	case errors.Is(err, fs.ErrExist):
		return exists()
	case err == nil:
		return os.Remove(tmp)
	}
	// A filesystem without hard links.
	if _, err := os.Lstat(output); err == nil {
		return exists()
	}
	return os.Rename(tmp, output)
}

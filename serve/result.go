package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// removeStaleResults removes from dir the temporaries an interrupted run
// left for the output named base: its hidden result (resultTemp) and the
// encoders' private directories beside it ("." + that name's stem +
// ".vsr-" and os.MkdirTemp's digits, see video.NewWorkdir). Only these
// exact names: those of another output (the same stem, another extension)
// are its task's. The caller holds the output's lock (lockOutput), so no
// live process owns them.
func removeStaleResults(dir *os.Root, base string, log *slog.Logger) {
	tmp := filepath.Base(resultTemp(base))
	work := "." + strings.TrimSuffix(tmp, filepath.Ext(tmp)) + ".vsr-"
	d, err := dir.Open(".")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, work)
		if n != tmp && (!ok || rest == "" || strings.Trim(rest, "0123456789") != "") {
			continue
		}
		if dir.RemoveAll(n) == nil {
			log.Info("removed a temporary of an interrupted run", "output", base, "name", n)
		}
	}
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
	err := video.RenameNoReplace(tmp, output)
	if errors.Is(err, video.ErrExists) {
		os.Remove(tmp)
		return fmt.Errorf("save_result_path %s exists and this task did not write it: %w; remove it, or submit again with \"overwrite\": true", name, video.ErrExists)
	}
	return err
}

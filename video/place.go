package video

import (
	"errors"
	"fmt"
	"os"
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

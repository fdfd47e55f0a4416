package testutil

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes (rounded up to whole pages, which
// are what its files take) on a new temporary directory and returns it,
// unmounted when t ends: a real filesystem that fills, for tests of what
// vsr does when the disk is full. It skips t, saying why, unless it runs
// as root on Linux (as CI does) and the mount succeeds.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs a full filesystem: a small tmpfs, which only root on Linux can mount (run as root, as CI does)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("needs a full filesystem, and a tmpfs cannot be mounted here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// ResizeTmpfs gives the tmpfs that Tmpfs mounted on dir a new size in
// bytes (not less than its files take).
func ResizeTmpfs(t testing.TB, dir string, size int64) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+strconv.FormatInt(size, 10), dir).CombinedOutput(); err != nil {
		t.Fatalf("resizing the tmpfs on %s: %v: %s", dir, err, out)
	}
}

// Pages is the bytes a file of n bytes takes on a tmpfs: whole pages.
func Pages(n int64) int64 {
	p := int64(os.Getpagesize())
	return (n + p - 1) / p * p
}

// PagesShort is the room, in whole pages, for all of a file of n bytes
// (n > 0) but its last page: a tmpfs of this size fills while the file's
// last bytes are written.
func PagesShort(n int64) int64 { return Pages(n) - int64(os.Getpagesize()) }

package video

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// encodeTo writes two black frames to out with opt.
func encodeTo(t *testing.T, out string, opt EncodeOptions) error {
	t.Helper()
	e, err := NewEncoder(testCtx(t), out, opt)
	if err != nil {
		return err
	}
	frame := make([]byte, e.FrameSize())
	for range 2 {
		if err := e.Write(frame); err != nil {
			e.Abort()
			return err
		}
	}
	return e.Close()
}

// TestNoReplace: with NoReplace an existing output is kept, the new one
// discarded with ErrExists, by the encoder and by Concat.
func TestNoReplace(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.mp4")
	opt := testEncodeOptions()
	opt.NoReplace = true
	if err := encodeTo(t, out, opt); err != nil {
		t.Fatalf("first output: %v", err)
	}
	os.WriteFile(out, []byte("keep"), 0o644)
	if err := encodeTo(t, out, opt); !errors.Is(err, ErrExists) {
		t.Errorf("encoder over an existing output: %v", err)
	}
	seg := filepath.Join(dir, "seg.mp4")
	if err := encodeTo(t, seg, testEncodeOptions()); err != nil {
		t.Fatal(err)
	}
	if _, err := Concat(testCtx(t), []string{seg}, out, ConcatOptions{NoReplace: true}); !errors.Is(err, ErrExists) {
		t.Errorf("concat over an existing output: %v", err)
	}
	if got, _ := os.ReadFile(out); string(got) != "keep" {
		t.Errorf("the existing output was replaced")
	}
	if err := encodeTo(t, out, testEncodeOptions()); err != nil { // replacing is the default
		t.Errorf("replace: %v", err)
	}
	if ents := dirEntries(t, dir); len(ents) != 2 {
		t.Errorf("directory holds %v", ents)
	}
}

// TestDescriptorPaths: a directory opened by this process and named
// through /proc/self/fd is where ffmpeg's output goes, and a file named so
// is what ffmpeg reads, also after the names are swapped.
func TestDescriptorPaths(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/self/fd is Linux's")
	}
	needFFmpeg(t)
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fdDir := "/proc/self/fd/" + strconv.Itoa(int(d.Fd()))
	if ChildPath(fdDir) == fdDir || ChildPath("/tmp/x") != "/tmp/x" {
		t.Fatalf("ChildPath(%s) = %s", fdDir, ChildPath(fdDir))
	}
	seg := filepath.Join(fdDir, "seg.mp4")
	if err := encodeTo(t, seg, testEncodeOptions()); err != nil {
		t.Fatal(err)
	}
	if _, err := Concat(testCtx(t), []string{seg, seg}, filepath.Join(fdDir, "joined.mp4"), ConcatOptions{}); err != nil {
		t.Fatal(err)
	}
	// Read through a descriptor while the name points elsewhere.
	f, err := os.Open(filepath.Join(dir, "joined.mp4"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	os.Rename(filepath.Join(dir, "joined.mp4"), filepath.Join(dir, "moved.mp4"))
	os.Rename(filepath.Join(dir, "seg.mp4"), filepath.Join(dir, "joined.mp4"))
	info, err := Probe(testCtx(t), "/proc/self/fd/"+strconv.Itoa(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	if info.Frames != 4 {
		t.Errorf("read %d frames through the descriptor, want the joined file's 4", info.Frames)
	}
}

func TestChildPathStdin(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for in, want := range map[string]string{
		"/dev/stdin":        "/proc/" + pid + "/fd/0",
		"/dev/fd/5":         "/proc/" + pid + "/fd/5",
		"/proc/self/fd/7/x": "/proc/" + pid + "/fd/7/x",
		"/videos/in.mp4":    "/videos/in.mp4",
		"/dev/stdin.mp4/..": "/dev/stdin.mp4/..",
	} {
		if got := ChildPath(in); got != want {
			t.Errorf("ChildPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWorkdir: an output's temporaries go to a private directory named
// through its descriptor: other users cannot plant links in it, and a
// link swapped in for its name does not redirect the writes.
func TestWorkdir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("descriptor paths are Linux's")
	}
	dir := t.TempDir()
	w, err := NewWorkdir(filepath.Join(dir, "out.mp4"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(w.name)
	if err != nil || st.Mode().Perm() != 0o700 || !strings.HasPrefix(filepath.Base(w.name), ".out.vsr-") {
		t.Fatalf("workdir %s: %v %v", w.name, st.Mode(), err)
	}
	outside := t.TempDir()
	moved := filepath.Join(dir, "moved")
	os.Rename(w.name, moved)
	os.Symlink(outside, w.name)
	if err := os.WriteFile(w.Path("tmp.mp4"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "tmp.mp4")); err == nil {
		t.Error("a link swapped in for the workdir's name redirected the write")
	}
	if _, err := os.Stat(filepath.Join(moved, "tmp.mp4")); err != nil {
		t.Errorf("the write did not reach the workdir: %v", err)
	}
	w.Remove()
	w.Remove()
	if _, err := os.Stat(filepath.Join(outside)); err != nil {
		t.Errorf("Remove followed the link: %v", err)
	}
}

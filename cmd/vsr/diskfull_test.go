package main

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/internal/flock"
	"github.com/vsr-dev/vsr/internal/testutil"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/serve"
)

// Full disks (issue 50). Each test mounts a tmpfs (testutil.Tmpfs: as
// root only) sized from a first run elsewhere so that it fills while the
// output's last page is written, where ffmpeg 5.1 says "Error writing
// trailer ... No space left on device" and exits 0. vsr runs in this
// process: an error is what makes it exit 1.

// restoreArgs are the arguments of a restore of in into out on the CPU.
func restoreArgs(in, out string, flags ...string) []string {
	return append([]string{"restore", in, "-o", out, "-s", "2", "--device", "cpu", "--progress", "none"}, flags...)
}

// mustRestore runs vsr with args and fails t on an error.
func mustRestore(t *testing.T, args []string) (stderr string) {
	t.Helper()
	_, stderr, err := vsrOutputs(args...)
	if err != nil {
		t.Fatalf("vsr %v: %v\n%s", args, err, stderr)
	}
	return stderr
}

// fileSize is the size of the file at path; 0 fails t.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil || st.Size() == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	return st.Size()
}

// joinSizes runs a restore of in with flags twice, outside any tmpfs, and
// returns the bytes its journal takes on a tmpfs when the parts are all
// finished (the first run's join fails: a dangling link is at the
// output) and the size of the joined output (the second run's).
func joinSizes(t *testing.T, in string, flags ...string) (journal, out int64) {
	t.Helper()
	ref := filepath.Join(t.TempDir(), "ref.mp4")
	if err := os.Symlink("nowhere", ref); err != nil {
		t.Skip("no symbolic links here: ", err)
	}
	if _, stderr, err := vsrOutputs(restoreArgs(in, ref, flags...)...); err == nil {
		t.Fatalf("the join succeeded over a link\n%s", stderr)
	}
	es, err := os.ReadDir(pipeline.JournalDir(ref))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if fi, err := e.Info(); err == nil {
			journal += testutil.Pages(fi.Size())
		}
	}
	os.Remove(ref)
	mustRestore(t, restoreArgs(in, ref, flags...))
	return journal, fileSize(t, ref)
}

// checkFull fails t unless the restore failed (exit 1) in one line saying
// that the disk is full, naming no internal path.
func checkFull(t *testing.T, err error, stderr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the restore succeeded on a full disk\n%s", stderr)
	}
	if msg := err.Error(); !strings.Contains(msg, "no space left on the output's filesystem") || !strings.Contains(msg, "B more needed") ||
		strings.Contains(msg, "\n") || strings.Contains(msg, "/proc/") {
		t.Errorf("error %q: want one line saying the disk is full and how much more room is needed", msg)
	}
}

// checkKept fails t unless the journal of out holds parts parts and the
// run said that they are kept.
func checkKept(t *testing.T, out string, parts int, stderr string) {
	t.Helper()
	if j := readJournal(pipeline.JournalDir(out)); j == nil || len(j.Parts) != parts {
		t.Errorf("journal after the failure: %+v, want %d parts", j, parts)
	}
	if !strings.Contains(stderr, "the finished parts are kept in "+pipeline.JournalDir(out)) {
		t.Errorf("stderr %q: want the kept parts named", stderr)
	}
}

// TestRestoreDiskFull: a restore whose output's filesystem fills as the
// output is finished (the last part's encoder, or the join) fails with a
// one-line error saying so, publishes nothing, leaves a previous output
// (-y) as it was, and keeps the journal and every part recorded, from
// which the same command resumes once there is room.
func TestRestoreDiskFull(t *testing.T) {
	needFFmpeg(t)
	in := filepath.Join(t.TempDir(), "in.mp4")
	sizedClip(t, in, 24, 16, 100) // 4 s: one part unless asked for more

	t.Run("one part", func(t *testing.T) {
		ref := filepath.Join(t.TempDir(), "ref.mp4")
		mustRestore(t, restoreArgs(in, ref))
		size := fileSize(t, ref)
		mnt := testutil.Tmpfs(t, testutil.PagesShort(size))
		out := filepath.Join(mnt, "out.mp4")
		_, stderr, err := vsrOutputs(restoreArgs(in, out)...)
		checkFull(t, err, stderr)
		if strings.Contains(stderr, "finished parts are kept") {
			t.Errorf("stderr %q: no part was kept", stderr)
		}
		onlyFiles(t, mnt)
		testutil.ResizeTmpfs(t, mnt, 2*testutil.Pages(size))
		mustRestore(t, restoreArgs(in, out))
		checkOutput(t, out, 100, 48, 32)
	})

	t.Run("journal -y", func(t *testing.T) {
		flags := []string{"--checkpoint-every", "2", "-y"} // 2 parts
		journal, size := joinSizes(t, in, flags[:2]...)
		mnt := testutil.Tmpfs(t, testutil.Pages(size)+journal+testutil.PagesShort(size))
		out := filepath.Join(mnt, "out.mp4")
		prev := bytes.Repeat([]byte("previous output "), int(size/16))
		if err := os.WriteFile(out, prev, 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, err := vsrOutputs(restoreArgs(in, out, flags...)...)
		checkFull(t, err, stderr)
		if b, _ := os.ReadFile(out); !bytes.Equal(b, prev) {
			t.Errorf("the previous output was replaced: %d bytes, want %d", len(b), len(prev))
		}
		checkKept(t, out, 2, stderr)
		testutil.ResizeTmpfs(t, mnt, 4<<20) // room for the join's margin too
		stderr = mustRestore(t, append(restoreArgs(in, out, flags...), "--progress", "plain"))
		if !strings.Contains(stderr, "resuming at frame 50 of 100") || strings.Contains(stderr, "temporaries of interrupted vsr runs") {
			t.Errorf("stderr %q: want it to resume, with no note of its own journal", stderr)
		}
		checkOutput(t, out, 100, 48, 32)
		onlyFiles(t, mnt, "out.mp4")
	})

	t.Run("segments", func(t *testing.T) {
		flags := []string{"--segments", "2"} // a part per segment
		journal, size := joinSizes(t, in, flags...)
		mnt := testutil.Tmpfs(t, journal+testutil.PagesShort(size))
		out := filepath.Join(mnt, "out.mp4")
		_, stderr, err := vsrOutputs(restoreArgs(in, out, flags...)...)
		checkFull(t, err, stderr)
		if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("an output was published: %v", err)
		}
		checkKept(t, out, 2, stderr)
	})
}

// TestRestoreKeptOnlyWhenKept: a run that keeps no part (its journal
// refused: a link; or held by another run) does not say that parts are
// kept.
func TestRestoreKeptOnlyWhenKept(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	sizedClip(t, in, 24, 16, 100)
	out := filepath.Join(dir, "out.mp4")
	elsewhere := filepath.Join(dir, "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	if err := os.Symlink(elsewhere, pipeline.JournalDir(out)); err != nil {
		t.Skip("no symbolic links here: ", err)
	}
	_, stderr, err := vsrOutputs(restoreArgs(in, out, "--checkpoint-every", "2")...)
	if err == nil || strings.Contains(stderr, "finished parts are kept") {
		t.Errorf("a linked journal: %v, stderr %q: want a refusal that keeps nothing", err, stderr)
	}
	os.Remove(pipeline.JournalDir(out))
	os.Mkdir(pipeline.JournalDir(out), 0o700)
	f, err := os.Open(pipeline.JournalDir(out))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := flock.TryLock(f); err != nil {
		t.Skip("no file locks here: ", err)
	}
	_, stderr, err = vsrOutputs(restoreArgs(in, out, "--checkpoint-every", "2")...)
	if err == nil || !strings.Contains(err.Error(), "another run") || strings.Contains(stderr, "finished parts are kept") {
		t.Errorf("a journal locked by another run: %v, stderr %q: want a refusal that keeps nothing", err, stderr)
	}
}

// TestServeDiskFull: a service task whose output's filesystem fills as
// the output is finished fails with error_type DiskFull, and its result
// is not served; the result of an earlier task stays.
func TestServeDiskFull(t *testing.T) {
	needFFmpeg(t)
	mnt := testutil.Tmpfs(t, 4<<20)
	run, err := newServeRunner(newServe(), serveFlags{maxQueue: 10, base: cpuRestore}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	svc, err := serve.New(serve.Config{Data: t.TempDir(), OutputRoot: mnt, Workers: run.Workers()}, run)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	a := api{t, srv.URL}
	sizedClip(t, filepath.Join(svc.InputRoot(), "in.mp4"), 24, 16, 100)
	first := a.wait(a.submit(map[string]any{"video_path": "in.mp4", "save_result_path": "first.mp4", "sr_ratio": 2}), serve.Completed, time.Minute)
	firstOut := first["save_result_path"].(string)
	firstBytes, _ := os.ReadFile(firstOut)
	used := testutil.Pages(int64(len(firstBytes)))
	testutil.ResizeTmpfs(t, mnt, used+testutil.PagesShort(int64(len(firstBytes))))

	id := a.submit(map[string]any{"video_path": "in.mp4", "save_result_path": "second.mp4", "sr_ratio": 2})
	m := a.wait(id, serve.Failed, time.Minute)
	if e, _ := m["error"].(string); m["error_type"] != "DiskFull" || !strings.Contains(e, "no space left on the output's filesystem") || strings.Contains(e, "/proc/") {
		t.Errorf("task on a full disk: %v", m)
	}
	resp, err := http.Get(srv.URL + "/v1/tasks/" + id + "/result")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("result of the failed task: %d, want 404", resp.StatusCode)
	}
	if b, _ := os.ReadFile(firstOut); !bytes.Equal(b, firstBytes) {
		t.Errorf("the first task's result changed")
	}
	onlyFiles(t, mnt, "first.mp4")
}

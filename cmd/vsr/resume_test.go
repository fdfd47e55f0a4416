package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/journal"
	"github.com/vsr-dev/vsr/pipeline"
)

// TestResumeJournalSetAside: restore in segments finds a journal that is
// not its own beside the output (another input), sets it aside with a
// notice saying why, and so does --no-resume with any journal; the
// journal directory is gone once the output is written. (The resume
// itself, after an interruption, is pipeline's TestResumeSegments.)
func TestResumeJournalSetAside(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	sizedClip(t, in, 24, 16, 12)
	out := filepath.Join(dir, "out.mkv")
	jdir := pipeline.JournalDir(out)
	plant := func() {
		t.Helper()
		if err := os.Mkdir(jdir, 0o700); err != nil {
			t.Fatal(err)
		}
		other := filepath.Join(dir, "other")
		os.WriteFile(other, []byte("another input"), 0o644)
		f, err := os.Open(other)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		id, err := journal.IdentityOf(f, "probe")
		if err != nil {
			t.Fatal(err)
		}
		st, _ := journal.NewSettings("model", nil)
		s, err := journal.Open(jdir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Save(&journal.Journal{Input: id, Settings: st, TotalFrames: 12}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		flags  []string
		notice string
	}{
		{nil, "journal set aside: the input changed"},
		{[]string{"--no-resume"}, "journal set aside: --no-resume"},
	} {
		plant()
		args := append([]string{"restore", in, "-o", out, "-y", "--device", "cpu", "--segments", "4", "--codec", "libx264", "--preset", "ultrafast", "--progress", "none", "--json"}, c.flags...)
		stdout, stderr, err := vsrOutputs(args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.flags, err, stderr)
		}
		if !strings.Contains(stderr, c.notice) {
			t.Errorf("%v: stderr %q, want %q", c.flags, stderr, c.notice)
		}
		if strings.Contains(stderr, "resuming at frame") {
			t.Errorf("%v: resumed: %q", c.flags, stderr)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("%v: %v: %q", c.flags, err, stdout)
		}
		if _, ok := res["resumed_from_frame"]; ok || res["frames"] != 12.0 {
			t.Errorf("%v: JSON %v", c.flags, res)
		}
		if _, err := os.Lstat(jdir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: journal directory left: %v", c.flags, err)
		}
		if _, err := os.Stat(out); err != nil {
			t.Error(err)
		}
	}
}

// TestResumeAfterJoinFailed: a restore in segments whose join fails (a
// name that appeared at the output: a dangling link, which the checks
// before the work do not see) keeps its segments and says how to resume;
// the same command run again resumes, says where, in --json too, and its
// output's packets are those of a run never stopped.
func TestResumeAfterJoinFailed(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	sizedClip(t, in, 24, 16, 12)
	args := func(out string) []string {
		return []string{"restore", in, "-o", out, "--device", "cpu", "--segments", "4", "--codec", "libx264", "--preset", "ultrafast", "--progress", "none", "--json"}
	}
	ref := filepath.Join(dir, "ref.mkv")
	if _, stderr, err := vsrOutputs(args(ref)...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	out := filepath.Join(dir, "out.mkv")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), out); err != nil {
		t.Skip("no symbolic links here: ", err)
	}
	_, stderr, err := vsrOutputs(args(out)...)
	if err == nil {
		t.Fatal("the join succeeded over a link")
	}
	if !strings.Contains(stderr, "run the same command again to resume") {
		t.Errorf("stderr %q", stderr)
	}
	if fi, err := os.Lstat(out); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("output after the failed join: %v %v", fi, err)
	}
	os.Remove(out)
	stdout, stderr, err := vsrOutputs(args(out)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "resuming at frame 9 of 12") {
		t.Errorf("stderr %q", stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %q", err, stdout)
	}
	if res["resumed_from_frame"] != 9.0 || res["frames"] != 12.0 {
		t.Errorf("JSON %v", res)
	}
	if _, err := os.Lstat(pipeline.JournalDir(out)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal directory left: %v", err)
	}
	packets := func(path string) string {
		b, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-i", path, "-map", "0", "-c", "copy", "-f", "streamhash", "-hash", "sha256", "-").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := packets(out), packets(ref); got != want {
		t.Errorf("resumed output's packets\n%s\ndiffer from an uninterrupted run's\n%s", got, want)
	}
}

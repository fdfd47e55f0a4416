package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/journal"
	"github.com/vsr-dev/vsr/pipeline"
)

// TestResumeJournalSetAside: restore in segments finds a journal that is
// not its own beside the output (another input), sets it aside with a
// notice saying why, and so does --no-resume with any journal; the
// journal directory is gone once the output is written. --checkpoint-every
// 0 keeps no journal: it leaves the one it finds as it is, and a negative
// value is refused. (The resume itself, after an interruption, is
// pipeline's TestResumeSegments.)
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
		{[]string{"--checkpoint-every", "0"}, ""},
	} {
		plant()
		args := append([]string{"restore", in, "-o", out, "-y", "--device", "cpu", "--segments", "4", "--codec", "libx264", "--preset", "ultrafast", "--progress", "none", "--json"}, c.flags...)
		stdout, stderr, err := vsrOutputs(args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.flags, err, stderr)
		}
		if c.notice == "" && strings.Contains(stderr, "journal") || !strings.Contains(stderr, c.notice) {
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
		if c.notice == "" { // no journal: the one planted stays as it was
			if _, err := os.Stat(filepath.Join(jdir, journal.FileName)); err != nil {
				t.Errorf("%v: the journal found: %v", c.flags, err)
			}
			os.RemoveAll(jdir)
		} else if _, err := os.Lstat(jdir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: journal directory left: %v", c.flags, err)
		}
		if _, err := os.Stat(out); err != nil {
			t.Error(err)
		}
	}
	if _, err := vsr(t, "restore", in, "-o", out, "-y", "--checkpoint-every", "-1"); err == nil || !strings.Contains(err.Error(), "or 0 for no journal") {
		t.Errorf("--checkpoint-every -1: %v", err)
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

// audioClip writes a clip of n frames of w x h at 25 fps with a tone.
func audioClip(t *testing.T, path string, w, h, n int) {
	t.Helper()
	ffmpeg(t, "-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=25", w, h), "-f", "lavfi", "-i", "sine=f=440:sample_rate=48000",
		"-t", fmt.Sprintf("%g", float64(n)/25), "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", path)
}

// framemd5 is ffmpeg's checksum of every decoded frame of path, video and
// audio, one line each.
func framemd5(t *testing.T, path string) string {
	t.Helper()
	b, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-i", path, "-map", "0", "-f", "framemd5", "-").Output()
	if err != nil {
		t.Fatalf("framemd5 %s: %v", path, err)
	}
	return string(b)
}

// frameLines counts the lines of stream s ("0" video, "1" audio) in a
// framemd5.
func frameLines(md5 string, s string) int {
	n := 0
	for _, l := range strings.Split(md5, "\n") {
		if strings.HasPrefix(l, s+",") {
			n++
		}
	}
	return n
}

// stopAt runs bin with args until the journal of out records parts parts,
// then sends it sig, and returns the frames the journal held then and
// vsr's stderr; finished is true when vsr ended before (nothing to stop).
func stopAt(t *testing.T, bin string, args []string, out string, parts int, sig os.Signal) (frames int, stderr string, finished bool) {
	t.Helper()
	j, stderr, finished := stopWhen(t, bin, args, out, func(j *journal.Journal) bool { return len(j.Parts) >= parts }, sig)
	if j != nil {
		frames = int(j.Done())
	}
	return frames, stderr, finished
}

// stopWhen runs bin with args until the journal of out satisfies when,
// then sends it sig, and returns the journal a rerun finds (nil: none) and
// vsr's stderr; finished is true when vsr ended before (nothing to stop).
func stopWhen(t *testing.T, bin string, args []string, out string, when func(*journal.Journal) bool, sig os.Signal) (j *journal.Journal, stderr string, finished bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var eb strings.Builder
	cmd.Stderr = &eb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	jdir := pipeline.JournalDir(out)
	for {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("vsr %v ended before it was stopped: %v\n%s", args, err, eb.String())
			}
			return nil, eb.String(), true
		default:
		}
		if j := readJournal(jdir); j != nil && when(j) {
			cmd.Process.Signal(sig)
			<-exited
			return readJournal(jdir), eb.String(), false // what a rerun finds
		}
		time.Sleep(time.Millisecond) // polls the journal: the stop lands right after what when waits for is recorded
	}
}

// readJournal reads the journal in jdir: nil when there is none yet.
func readJournal(jdir string) *journal.Journal {
	s, err := journal.Open(jdir)
	if err != nil {
		return nil
	}
	defer s.Close()
	l, err := s.Load(journal.LoadOptions{})
	if err != nil {
		return nil
	}
	return l.Journal
}

// TestResumeKilled: vsr restore killed (SIGKILL, and SIGTERM) at several
// points, in parts of 5 frames over 2 segments and over 1, then run
// again with the same command, resumes where the journal says, and writes
// an output whose every video and audio frame is that of a run never
// stopped; no output is visible before the end.
func TestResumeKilled(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	in := filepath.Join(dir, "in.mp4")
	audioClip(t, in, 48, 32, 50)
	args := func(out string, segments int) []string {
		return []string{"restore", in, "-o", out, "--device", "cpu", "--segments", strconv.Itoa(segments), "--checkpoint-every", "0.2",
			"--codec", "libx264", "--preset", "ultrafast", "--progress", "none", "--json"}
	}
	for _, c := range []struct {
		segments int
		at       []int // parts recorded when stopped
		sig      []os.Signal
	}{
		{2, []int{1, 3, 6}, []os.Signal{os.Kill, syscall.SIGTERM, os.Kill}},
		{1, []int{2, 5, 8}, []os.Signal{os.Kill, os.Kill, os.Interrupt}},
	} {
		ref := filepath.Join(dir, fmt.Sprintf("ref%d.mkv", c.segments))
		if out, err := exec.Command(bin, args(ref, c.segments)...).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		want := framemd5(t, ref)
		if v, a := frameLines(want, "0"), frameLines(want, "1"); v != 50 || a == 0 {
			t.Fatalf("reference: %d video frames, %d audio", v, a)
		}
		stopped := 0
		for k, at := range c.at {
			out := filepath.Join(dir, fmt.Sprintf("out%d-%d.mkv", c.segments, at))
			frames, stderr, finished := stopAt(t, bin, args(out, c.segments), out, at, c.sig[k])
			if finished {
				t.Logf("%d segments: the run ended before %d parts were seen", c.segments, at)
				continue
			}
			stopped++
			if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("output visible after a stopped run: %v", err)
			}
			if c.sig[k] != os.Kill && !strings.Contains(stderr, "run the same command again to resume") {
				t.Errorf("after %v: stderr %q", c.sig[k], stderr)
			}
			cmd := exec.Command(bin, args(out, c.segments)...)
			var eb strings.Builder
			cmd.Stderr = &eb
			stdout, err := cmd.Output()
			if err != nil {
				t.Fatalf("rerun: %v\n%s", err, eb.String())
			}
			if frames == 50 { // stopped while joining: the last part runs again
				frames = 45
			}
			if want := fmt.Sprintf("resuming at frame %d of 50", frames); !strings.Contains(eb.String(), want) {
				t.Errorf("%d segments, stopped at %d parts: stderr %q, want %q", c.segments, at, eb.String(), want)
			}
			var res map[string]any
			if err := json.Unmarshal(stdout, &res); err != nil || res["resumed_from_frame"] != float64(frames) || res["frames"] != 50.0 {
				t.Errorf("JSON %s: %v", stdout, err)
			}
			if got := framemd5(t, out); got != want {
				t.Errorf("%d segments, stopped at %d parts: the resumed output's frames differ from an uninterrupted run's", c.segments, at)
			}
			if _, err := os.Lstat(pipeline.JournalDir(out)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("journal directory left: %v", err)
			}
		}
		if stopped == 0 {
			t.Errorf("%d segments: every run ended before it was stopped", c.segments)
		}
	}
}

// TestResumeFolderKilled: a folder restore stopped (SIGTERM) in its second
// file says how to resume it: run again with --skip-existing (the first
// file's output is in the way), which skips the first file and resumes the
// second, whose frames are those of the file restored alone.
func TestResumeFolderKilled(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	audioClip(t, filepath.Join(src, "a.mp4"), 48, 32, 20)
	audioClip(t, filepath.Join(src, "b.mp4"), 48, 32, 50)
	flags := []string{"--device", "cpu", "--checkpoint-every", "0.2", "--codec", "libx264", "--preset", "ultrafast", "--progress", "none"}
	ref := filepath.Join(dir, "ref.mp4")
	if out, err := exec.Command(bin, append([]string{"restore", filepath.Join(src, "b.mp4"), "-o", ref}, flags...)...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	outDir := filepath.Join(dir, "out")
	args := append([]string{"restore", src, "-o", outDir}, flags...)
	b := filepath.Join(outDir, "b.mp4")
	frames, stderr, finished := stopAt(t, bin, args, b, 3, syscall.SIGTERM)
	if finished {
		t.Skip("the folder run ended before it was stopped")
	}
	if want := "run the same command again with --skip-existing to resume"; !strings.Contains(stderr, want) {
		t.Errorf("stopped run's stderr %q, want %q", stderr, want)
	}
	if _, err := os.Stat(filepath.Join(outDir, "a.mp4")); err != nil {
		t.Fatalf("the first file's output: %v", err)
	}
	if _, err := os.Lstat(b); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("output visible after a stopped run: %v", err)
	}
	out, err := exec.Command(bin, append(args, "--skip-existing")...).CombinedOutput()
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("resuming at frame %d of 50", frames); !strings.Contains(string(out), want) || !strings.Contains(string(out), "skipped") {
		t.Errorf("rerun's stderr %q, want %q and a.mp4 skipped", out, want)
	}
	if got, want := framemd5(t, b), framemd5(t, ref); got != want {
		t.Errorf("the resumed file's frames differ from the file restored alone")
	}
}

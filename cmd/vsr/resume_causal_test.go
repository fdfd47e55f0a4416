package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/journal"
	"github.com/vsr-dev/vsr/pipeline"
)

// checkpointFrames are the output frames of the checkpoints a causal
// model's journal plans (its "checkpoints" setting, batch:in:out each).
func checkpointFrames(t *testing.T, j *journal.Journal) []int {
	t.Helper()
	var outs []int
	for _, c := range strings.Split(j.Settings.Values["checkpoints"], ",") {
		f := strings.Split(c, ":")
		n, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 3 || err != nil {
			t.Fatalf("journal's checkpoints %q", j.Settings.Values["checkpoints"])
		}
		outs = append(outs, n)
	}
	return outs
}

// causalRun is a restore of one clip by a causal model, run by a built
// vsr: an uninterrupted reference, runs stopped, and their reruns.
type causalRun struct {
	t     *testing.T
	bin   string
	dir   string
	in    string
	flags []string // the model and its settings
	n     int      // runs made, for unique outputs
}

func (c *causalRun) args(out string, flags ...string) []string {
	return append(append([]string{"restore", c.in, "-o", out, "--device", "cpu", "--checkpoint-every", "0.2",
		"--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none", "--json"}, c.flags...), flags...)
}

// output names a new output.
func (c *causalRun) output() string {
	c.n++
	return filepath.Join(c.dir, fmt.Sprintf("out%d.mkv", c.n))
}

// reference restores the clip uninterrupted with flags and returns the
// framemd5 of its video and audio.
func (c *causalRun) reference(flags ...string) string {
	t := c.t
	t.Helper()
	ref := c.output()
	if out, err := exec.Command(c.bin, c.args(ref, flags...)...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	md5 := framemd5(t, ref)
	if v, a := frameLines(md5, "0"), frameLines(md5, "1"); v != 50 || a == 0 {
		t.Fatalf("reference %v: %d video frames, %d audio", flags, v, a)
	}
	return md5
}

// stop runs the restore into out with flags until when holds of its
// journal, then sends it sig: it returns the journal a rerun finds, which
// must hold a state (false: the run ended before).
func (c *causalRun) stop(out string, when func(*journal.Journal) bool, sig os.Signal, flags ...string) (*journal.Journal, bool) {
	t := c.t
	t.Helper()
	j, stderr, finished := stopWhen(t, c.bin, c.args(out, flags...), out, when, sig)
	if finished {
		t.Logf("%v: the run ended before it was stopped", flags)
		os.Remove(out)
		return nil, false
	}
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output visible after a stopped run: %v", err)
	}
	// A rerun resumes at the state (the parts after it, such as the last
	// one, recorded while the stop landed, are restored again).
	if j == nil || j.State == nil || j.Done() < j.State.Frame {
		t.Fatalf("the journal after the stop holds no state within its parts: %+v", j)
	}
	if sig != os.Kill && !strings.Contains(stderr, "run the same command again to resume") {
		t.Errorf("after %v: stderr %q", sig, stderr)
	}
	return j, true
}

var resumingAt = regexp.MustCompile(`resuming at frame (\d+) of 50`)

// rerun runs the restore into out with flags again and checks its
// output's frames against want (if set), its frame count, that its
// stderr says notice and that it resumed at frame from (0: not at all),
// in --json too; the journal is gone after it.
func (c *causalRun) rerun(out, want string, from int, notice string, flags ...string) {
	t := c.t
	t.Helper()
	cmd := exec.Command(c.bin, c.args(out, flags...)...)
	var eb strings.Builder
	cmd.Stderr = &eb
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("rerun %v: %v\n%s", flags, err, eb.String())
	}
	stderr := eb.String()
	m := resumingAt.FindStringSubmatch(stderr)
	switch {
	case from == 0 && m != nil:
		t.Errorf("%v: resumed: %q", flags, stderr)
	case from > 0 && (m == nil || m[1] != strconv.Itoa(from)):
		t.Errorf("%v: stderr %q, want resuming at frame %d of 50", flags, stderr, from)
	}
	if !strings.Contains(stderr, notice) {
		t.Errorf("%v: stderr %q, want %q", flags, stderr, notice)
	}
	var res map[string]any
	if err := json.Unmarshal(stdout, &res); err != nil || res["frames"] != 50.0 {
		t.Errorf("%v: JSON %s: %v", flags, stdout, err)
	}
	if got, ok := res["resumed_from_frame"]; (from > 0) != ok || ok && got != float64(from) {
		t.Errorf("%v: JSON resumed_from_frame %v, want %d", flags, got, from)
	}
	md5 := framemd5(t, out)
	if v := frameLines(md5, "0"); v != 50 {
		t.Errorf("%v: %d frames, want 50", flags, v)
	}
	if want != "" && md5 != want {
		t.Errorf("%v: resumed at %d: the output's frames differ from an uninterrupted run's", flags, from)
	}
	if _, err := os.Lstat(pipeline.JournalDir(out)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal directory left: %v", err)
	}
}

// TestResumeKilledCausal: vsr restore with the tiny SwiftVR checkpoint and
// its DiT (chunks of 8 frames, --dit-overlap 1 so that the DiT's history
// crosses each boundary; alone, in 2 bands (--reae-bands), and over a
// device list of two ranks in chunks and in sequence) and with CDA-VSR (a reset every 6 frames and at
// each key frame, every 7),
// killed right after its first checkpoint is recorded (on a boundary),
// after a middle one while the part after it is being written (inside the
// chunks after it) and after its last (in the last chunk), then run again
// with the same command, resumes at the journal's state, says where (in
// --json too), and writes an output whose every video and audio frame is
// that of a run never stopped; no output is visible before the end.
func TestResumeKilledCausal(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	// 50 frames with a tone, a key frame every 7 (CDA-VSR's recurrence
	// restarts at each, as at every --reset-every).
	in := filepath.Join(dir, "in.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=24x16:rate=25", "-f", "lavfi", "-i", "sine=f=440:sample_rate=48000",
		"-t", "2", "-c:v", "libx264", "-g", "7", "-pix_fmt", "yuv420p", "-c:a", "aac", in)
	ck, cda := filepath.Join(dir, "ck"), filepath.Join(dir, "cda.safetensors")
	for _, s := range [][]string{
		{"--family", "swiftvr", "--preset", "tiny", "-o", ck},
		{"--family", "cdavsr", "--scale", "2", "-o", cda},
	} {
		if out, err := exec.Command(bin, append([]string{"checkpoint", "synth"}, s...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	for _, c := range []struct {
		name  string
		flags []string
		every bool // stops at every kind of point; else on a boundary only
	}{
		{"swiftvr", []string{"--model", ck, "--clip-len", "8", "--dit-overlap", "1"}, true},
		{"swiftvr in 2 bands", []string{"--model", ck, "--clip-len", "8", "--dit-overlap", "1", "--reae-bands", "2"}, false},
		{"swiftvr on cpu,cpu", []string{"--model", ck, "--clip-len", "8", "--dit-overlap", "1", "--device", "cpu,cpu"}, false},
		{"swiftvr on cpu,cpu in sequence", []string{"--model", ck, "--clip-len", "8", "--dit-overlap", "1", "--device", "cpu,cpu", "--parallel", "sequence"}, false},
		{"cdavsr", []string{"--model", cda, "--reset-every", "6"}, true},
	} {
		r := &causalRun{t: t, bin: bin, dir: t.TempDir(), in: in, flags: c.flags}
		want := r.reference()
		stopped := 0
		var cps []int // the checkpoints' frames, from the first journal
		// On a boundary: as soon as the first checkpoint is recorded.
		out := r.output()
		if j, ok := r.stop(out, func(j *journal.Journal) bool {
			cps = checkpointFrames(t, j)
			return j.State != nil
		}, os.Kill); ok {
			stopped++
			t.Logf("%s, on a boundary: stopped at the state at frame %d (checkpoints %v)", c.name, j.State.Frame, cps)
			r.rerun(out, want, int(j.State.Frame), "resuming at frame")
		}
		if !c.every {
			if stopped == 0 {
				t.Errorf("%s: the run ended before it was stopped", c.name)
			}
			continue
		}
		if len(cps) < 3 {
			t.Fatalf("%s: checkpoints at %v, want 3 at least", c.name, cps)
		}
		// Inside a chunk: a middle checkpoint recorded, and the part after
		// it begun; in the last chunk: the last checkpoint recorded
		// (stopped by SIGTERM, which keeps the journal too).
		out = r.output()
		inside := func(j *journal.Journal) bool {
			if j.State == nil || j.State.Frame < int64(cps[len(cps)/2]) {
				return false
			}
			fi, err := os.Stat(filepath.Join(pipeline.JournalDir(out), fmt.Sprintf("part%04d.mkv", len(j.Parts))))
			return err == nil && fi.Size() > 0
		}
		last := func(j *journal.Journal) bool { return j.State != nil && j.State.Frame == int64(cps[len(cps)-1]) }
		for _, p := range []struct {
			name string
			when func(j *journal.Journal) bool
			sig  os.Signal
		}{{"inside a chunk", inside, os.Kill}, {"in the last chunk", last, syscall.SIGTERM}} {
			j, ok := r.stop(out, p.when, p.sig)
			if !ok {
				continue
			}
			stopped++
			t.Logf("%s, %s: stopped at the state at frame %d (checkpoints %v)", c.name, p.name, j.State.Frame, cps)
			r.rerun(out, want, int(j.State.Frame), "resuming at frame")
			out = r.output()
		}
		if stopped < 2 {
			t.Errorf("%s: stopped %d times of 3: the runs ended first", c.name, stopped)
		}
	}
}

// TestResumeSetAsideCausal: a SwiftVR restore (tiny, with its DiT) killed
// after a checkpoint and run again resumes from the checkpoint before when
// its journal is torn, and starts over, saying why, when the input, the
// model (another synthetic seed), a setting or the devices of its session
// (a device list of 2 ranks in sequence, then one device: the same
// batches, another layout of its state) changed since; either way the
// output is that of an uninterrupted run with the rerun's flags.
func TestResumeSetAsideCausal(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	in := filepath.Join(dir, "in.mp4")
	audioClip(t, in, 24, 16, 50)
	ck, ck2 := filepath.Join(dir, "ck"), filepath.Join(dir, "ck2")
	for _, s := range [][]string{{"-o", ck}, {"--seed", "2", "-o", ck2}} {
		if out, err := exec.Command(bin, append([]string{"checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny"}, s...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	r := &causalRun{t: t, bin: bin, dir: dir, in: in, flags: []string{"--model", ck, "--clip-len", "8", "--dit-overlap", "1"}}
	want := r.reference()
	second := func(j *journal.Journal) bool { // the second checkpoint recorded
		cps := checkpointFrames(t, j)
		return j.State != nil && len(cps) > 1 && j.State.Frame >= int64(cps[1])
	}

	// A torn journal.json: the one before it names the state before.
	out := r.output()
	if _, ok := r.stop(out, second, os.Kill); ok {
		jdir := pipeline.JournalDir(out)
		if err := os.WriteFile(filepath.Join(jdir, journal.FileName), []byte(`{"format":"vsr-journal","sha`), 0o600); err != nil {
			t.Fatal(err)
		}
		prev := readJournal(jdir)
		if prev == nil || prev.State == nil || prev.State.Frame == 0 {
			t.Fatalf("the journal before holds no state: %+v", prev)
		}
		r.rerun(out, want, int(prev.State.Frame), "took the previous checkpoint")
	}

	for _, c := range []struct {
		name          string
		before, after []string // flags of the run stopped and of the rerun
		change        func()
		notice        string
	}{
		{"input", nil, nil, func() {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(in, later, later); err != nil {
				t.Fatal(err)
			}
		}, "journal set aside: the input changed (modified"},
		{"model", nil, []string{"--model", ck2}, nil, "journal set aside: the model changed"},
		{"setting", nil, []string{"--dit-overlap", "2"}, nil, `journal set aside: the settings changed (setting:params`},
		{"devices", []string{"--device", "cpu,cpu", "--parallel", "sequence"}, []string{"--device", "cpu", "--parallel", "sequence"}, nil,
			`journal set aside: the settings changed (setting:devices "2" -> "1")`},
	} {
		out := r.output()
		if _, ok := r.stop(out, second, os.Kill, c.before...); !ok {
			continue
		}
		if c.change != nil {
			c.change()
		}
		w := want
		if c.after != nil { // the frames of an uninterrupted run with the new flags
			w = r.reference(c.after...)
		}
		r.rerun(out, w, 0, c.notice, c.after...)
	}
}

// lockedBuffer is a bytes.Buffer written and read from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLiveNoJournal: a live stream is not resumable (its source cannot be
// replayed): SwiftVR, which can save its state, restoring a stream from
// stdin into a file with --checkpoint-every keeps no journal beside it,
// while its frames come out and after the end.
func TestLiveNoJournal(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src.ts")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=24x16:rate=24:duration=2", "-c:v", "libx264", "-f", "mpegts", src)
	in, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "live.mkv")
	pr, pw := io.Pipe()
	var stdout, stderr lockedBuffer
	root := newRoot()
	root.SetArgs([]string{"restore", "-", "-o", out, "--model", ck, "--clip-len", "8", "--device", "cpu", "--checkpoint-every", "0.1",
		"--json", "--stats-every", "20ms", "--idle-timeout", "0", "--progress", "none"})
	root.SetIn(pr)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(context.Background()) }()
	go func() { pw.Write(in) }() // the whole stream, left open: the run waits for more
	journals := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, ".*.vsr-journal"))
		return m
	}
	deadline := time.After(2 * time.Minute)
	for n := 0; n < 24; {
		select {
		case err := <-done:
			t.Fatalf("the live run ended with its source open: %v\n%s", err, stderr.String())
		case <-deadline:
			t.Fatalf("no frames out: %s\n%s", stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond): // polls the statistics
		}
		for _, l := range strings.Split(stdout.String(), "\n") {
			var s pipeline.LiveStats
			if json.Unmarshal([]byte(l), &s) == nil {
				n = max(n, s.OutFrames)
			}
		}
	}
	if j := journals(); len(j) > 0 {
		t.Errorf("a live stream's journal, mid-stream: %v", j)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if j := journals(); len(j) > 0 {
		t.Errorf("a live stream's journal, at the end: %v", j)
	}
	if i := probe(t, out); i.Frames != 48 {
		t.Errorf("%d frames, want 48", i.Frames)
	}
}

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/journal"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/video"
)

var errInterrupted = errors.New("interrupted by the test")

// TestResumeSegments: a restore in 4 parts (4 segments of one part; one
// segment of 4 parts, rotating its encoder; 2 segments of 2) stopped after
// some of them are recorded resumes with the missing ones only, and its
// output is bitwise that of a run never stopped; no output shows before
// the end; a changed setting and --no-resume set the journal aside.
func TestResumeSegments(t *testing.T) {
	needTools(t)
	for _, c := range []struct {
		segments int
		every    float64
	}{{4, 0}, {1, 0.3}, {2, 0.3}} {
		t.Run(fmt.Sprintf("%d segments, parts of %g s", c.segments, c.every), func(t *testing.T) {
			testResumeSegments(t, c.segments, c.every)
		})
	}
}

func testResumeSegments(t *testing.T, segments int, every float64) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mkv")
	// -t, not -frames:v, which would end the input before its first
	// audio packet.
	ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10", "-f", "lavfi", "-i", "sine=f=440:d=1.2",
		"-t", "1.2", "-c:v", "libx264", "-c:a", "flac", in)
	info := probeWith(t, in)
	if info.Frames != 12 {
		t.Fatalf("%d frames", info.Frames)
	}
	m, err := compact.LoadBundled(cpu.New(0), 4)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var started []int
	var notices []string
	partStarted = func(i int) { mu.Lock(); started = append(started, i); mu.Unlock() }
	t.Cleanup(func() { partStarted, journaled = nil, nil })
	restore := func(out string, rs *Resume) (*Result, error) {
		mu.Lock()
		started, notices = nil, nil
		mu.Unlock()
		if rs != nil {
			rs.Notice = func(s string) { mu.Lock(); notices = append(notices, s); mu.Unlock() }
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		return Restore(ctx, Request{Input: info.Path, Output: out, Engine: compact.Engine{M: m}, Info: info, Segments: segments, CheckpointEvery: every, Resume: rs})
	}
	settings := func(v string) *Resume { return &Resume{Model: "m", Settings: map[string]string{"knob": v}} }
	ref := filepath.Join(dir, "ref.mkv") // made as the others, never stopped
	refRes, err := restore(ref, settings("a"))
	if err != nil {
		t.Fatal(err)
	}
	// The muxer writes random UIDs, so two runs never match byte for
	// byte: compare every stream's packets, bit for bit.
	packets := func(path string) string {
		return string(runTool(t, "ffmpeg", "-nostdin", "-v", "error", "-i", path, "-map", "0", "-c", "copy", "-f", "streamhash", "-hash", "sha256", "-"))
	}
	want := packets(ref)
	if !strings.Contains(want, ",a,") || strings.Contains(want, emptySHA256) {
		t.Fatalf("no audio in the reference, or a stream without packets: %s", want)
	}
	out := filepath.Join(dir, "out.mkv")
	jdir := JournalDir(out)

	// interrupt stops the run once k segments are recorded and returns
	// how many the journal holds.
	interrupt := func(k int, rs *Resume) int {
		t.Helper()
		journaled = func(j *journal.Journal) error {
			if len(j.Parts) >= k {
				return errInterrupted
			}
			return nil
		}
		defer func() { journaled = nil }()
		if _, err := restore(out, rs); !errors.Is(err, errInterrupted) {
			t.Fatalf("interrupted run: %v", err)
		}
		if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("output visible after an interrupted run: %v", err)
		}
		s, err := journal.Open(jdir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := s.Load(journal.LoadOptions{VerifyHashes: true})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(l.Journal.Parts); n < k {
			t.Fatalf("journal holds %d parts, want at least %d", n, k)
		}
		return len(l.Journal.Parts)
	}
	check := func(res *Result, wantRan int, notice string) {
		t.Helper()
		if got := packets(out); got != want {
			t.Errorf("resumed output's packets\n%s\ndiffer from an uninterrupted run's\n%s", got, want)
		}
		if len(started) != wantRan {
			t.Errorf("segments run %v, want %d of them", started, wantRan)
		}
		if notice != "" && !strings.Contains(strings.Join(notices, "\n"), notice) {
			t.Errorf("notices %q, want %q", notices, notice)
		}
		if _, err := os.Lstat(jdir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("journal directory left after success: %v", err)
		}
		os.Remove(out)
	}

	for _, k := range []int{1, 2, 3, 4} {
		n := interrupt(k, settings("a"))
		res, err := restore(out, settings("a"))
		if err != nil {
			t.Fatal(err)
		}
		if n == 4 { // stopped at the join: the last runs again for its report
			n = 3
		}
		frames := []int{0, 3, 6, 9}[n]
		check(res, 4-n, "resuming at frame "+itoa(frames)+" of 12")
		if got, want := res.Carried.String(), refRes.Carried.String(); got != want {
			t.Errorf("after %d segments: carried %q, want %q", n, got, want)
		}
		if res.ResumedFrom != frames {
			t.Errorf("ResumedFrom %d, want %d", res.ResumedFrom, frames)
		}
	}

	// A changed setting sets the journal aside, and so does Fresh.
	interrupt(2, settings("a"))
	res, err := restore(out, settings("b"))
	if err != nil {
		t.Fatal(err)
	}
	check(res, 4, `journal set aside: the settings changed (setting:knob "a" -> "b")`)
	interrupt(2, settings("a"))
	rs := settings("a")
	rs.Fresh = true
	if res, err = restore(out, rs); err != nil {
		t.Fatal(err)
	}
	check(res, 4, "journal set aside: --no-resume")
	if res.ResumedFrom != 0 {
		t.Errorf("ResumedFrom %d after --no-resume", res.ResumedFrom)
	}
}

// emptySHA256 is the SHA-256 of nothing: streamhash's hash of a stream
// without packets.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func itoa(n int) string { return strconv.Itoa(n) }

// TestResumeLock: one run at a time holds an output's journal.
func TestResumeLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir := t.TempDir()
	a, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := lockDir(a); err != nil {
		t.Fatal(err)
	}
	if err := lockDir(b); !errors.Is(err, errLocked) {
		t.Fatalf("second lock: %v", err)
	}
	a.Close()
	if err := lockDir(b); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
}

// TestResumeStopAndInputError: a resumable run whose context is cancelled
// (Ctrl-C, SIGTERM) keeps its journal; one whose input ends early (an
// error of the input itself) discards it, though parts were finished.
func TestResumeStopAndInputError(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mkv")
	ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10", "-frames:v", "12", "-c:v", "libx264", in)
	info := probeWith(t, in)
	m, err := compact.LoadBundled(cpu.New(0), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { journaled = nil })
	out := filepath.Join(dir, "out.mkv")
	restore := func(ctx context.Context, info *video.Info) error {
		_, err := Restore(ctx, Request{Input: info.Path, Output: out, Engine: compact.Engine{M: m}, Info: info, Segments: 1, CheckpointEvery: 0.3,
			Resume: &Resume{Model: "m"}})
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	journaled = func(j *journal.Journal) error {
		if len(j.Parts) == 2 {
			cancel()
		}
		return nil
	}
	if err := restore(ctx, info); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(JournalDir(out), journal.FileName)); err != nil {
		t.Fatalf("journal after a cancelled run: %v", err)
	}

	// The probe says 15 frames: the input ends in the fifth part, after
	// four were recorded.
	long := *info
	long.Frames = 15
	journaled = nil
	err = restore(context.Background(), &long)
	var ie *inputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "decoded only 12 of 15 frames") {
		t.Fatalf("run of an input that ends early: %v", err)
	}
	if _, err := os.Lstat(JournalDir(out)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal directory left after an error of the input: %v", err)
	}
}

// TestOpenPrivateDir: the journal directory is used only when what was
// opened is a directory of its owner's alone, never through a link.
func TestOpenPrivateDir(t *testing.T) {
	dir := t.TempDir()
	private := filepath.Join(dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := openPrivateDir(private)
	if err != nil {
		t.Fatalf("a private directory: %v", err)
	}
	f.Close()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{open, link, file} {
		if f, err := openPrivateDir(p); err == nil {
			f.Close()
			t.Errorf("%s: opened", filepath.Base(p))
		} else if !strings.Contains(err.Error(), "is not a private directory: remove it") {
			t.Errorf("%s: %v", filepath.Base(p), err)
		}
	}
}

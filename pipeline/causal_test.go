package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/journal"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// causalEngine is a small causal model.Resumer for tests: it takes the
// video in chunks of chunk frames and gives each frame out lag frames
// later (the last chunk gives the rest), as SwiftVR's decoder does; each
// output frame depends on every input frame before it (a running sum),
// so a resume that lost or repeated any state gives other frames. Its
// state may be saved after every other chunk but the last.
type causalEngine struct {
	chunk, lag int
	total      int      // of Plan
	in         int      // frames taken
	acc        []byte   // the sum of the frames taken, byte by byte
	held       [][]byte // output frames held back by the lag
	started    *int     // counts the chunks started, if set
	loads      int      // states loaded
	refuse     bool     // LoadState refuses every state, as one of another shape
}

type causalBatch struct {
	in, out     []byte
	inFS, outFS int
	nout        int
}

func (b *causalBatch) In() []byte                      { return b.in }
func (b *causalBatch) Out() []byte                     { return b.out }
func (b *causalBatch) Wait() error                     { return nil }
func (b *causalBatch) Free()                           {}
func (b *causalBatch) OutFrames() int                  { return b.nout }
func (e *causalEngine) OutputSize(w, h int) (int, int) { return w, h }

func (e *causalEngine) NewBatch(n, w, h int, in, out backend.PixelFormat) (backend.Batch, error) {
	inFS, outFS := in.FrameBytes(w, h), out.FrameBytes(w, h)
	return &causalBatch{in: make([]byte, n*inFS), out: make([]byte, (n+e.lag)*outFS), inFS: inFS, outFS: outFS}, nil
}

func (e *causalEngine) Plan(total int) ([]int, error) {
	e.total = total
	var plan []int
	for a := 0; a < total; a += e.chunk {
		plan = append(plan, min(e.chunk, total-a))
	}
	return plan, nil
}

func (e *causalEngine) Checkpoint(total, i int) (int, bool) {
	last := (total+e.chunk-1)/e.chunk - 1
	in := min((i+1)*e.chunk, total)
	return in - e.lag, i%2 == 0 && i < last && in > e.lag
}

func (e *causalEngine) Start(ctx context.Context, bt backend.Batch, k int) error {
	b := bt.(*causalBatch)
	if e.started != nil {
		*e.started++
	}
	if e.acc == nil {
		e.acc = make([]byte, b.inFS)
	}
	for f := range k {
		frame := b.in[f*b.inFS : (f+1)*b.inFS]
		out := make([]byte, b.outFS)
		for p := range out {
			out[p] = frame[p%b.inFS] ^ e.acc[p%b.inFS] + byte(e.in)
		}
		for q, v := range frame {
			e.acc[q] += v
		}
		e.held = append(e.held, out)
		e.in++
	}
	n := max(len(e.held)-e.lag, 0)
	if e.in == e.total {
		n = len(e.held)
	}
	for i := range n {
		copy(b.out[i*b.outFS:], e.held[i])
	}
	b.nout, e.held = n, e.held[n:]
	return nil
}

const causalMagic = "causal-test-state"

func (e *causalEngine) SaveState(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString(causalMagic)
	binary.Write(&b, binary.LittleEndian, [3]uint32{uint32(e.in), uint32(len(e.acc)), uint32(len(e.held))})
	b.Write(e.acc)
	for _, h := range e.held {
		binary.Write(&b, binary.LittleEndian, uint32(len(h)))
		b.Write(h)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func (e *causalEngine) LoadState(r io.Reader) error {
	if e.refuse {
		return errors.New("a state of another shape")
	}
	e.loads++
	magic := make([]byte, len(causalMagic))
	var hdr [3]uint32
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != causalMagic {
		return errors.New("not a state of this engine")
	}
	if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
		return err
	}
	e.in, e.acc, e.held = int(hdr[0]), make([]byte, hdr[1]), nil
	if _, err := io.ReadFull(r, e.acc); err != nil {
		return err
	}
	for range hdr[2] {
		var n uint32
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return err
		}
		h := make([]byte, n)
		if _, err := io.ReadFull(r, h); err != nil {
			return err
		}
		e.held = append(e.held, h)
	}
	return nil
}

var _ model.Resumer = (*causalEngine)(nil)

// TestResumeCausal: a causal engine (a model.Resumer with a lag, so that
// its output frames lag its input) stopped after each of its checkpoints,
// in one segment and in two (its output spread over two encoders), resumes
// from the state saved there, runs only the chunks after it, and writes an
// output whose frames and audio are those of a run never stopped; a torn
// journal resumes from the checkpoint before, a damaged state file and a
// state the engine refuses set the journal aside, and either way the
// output is the same.
func TestResumeCausal(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mkv")
	ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10", "-f", "lavfi", "-i", "sine=f=440:d=3",
		"-t", "3", "-c:v", "libx264", "-c:a", "flac", in)
	info := probeWith(t, in)
	if info.Frames != 30 {
		t.Fatalf("%d frames", info.Frames)
	}
	// Chunks of 4 with a lag of 3, parts of 5 frames: checkpoints after
	// chunks 2, 4 and 6 (12, 20 and 28 frames in), at output frames 9, 17
	// and 25.
	cps := []int{9, 17, 25}
	var mu sync.Mutex
	var notices []string
	t.Cleanup(func() { journaled = nil })
	restore := func(out string, segments int, e *causalEngine) (*Result, error) {
		mu.Lock()
		notices = nil
		mu.Unlock()
		rs := &Resume{Model: "causal", Notice: func(s string) { mu.Lock(); notices = append(notices, s); mu.Unlock() }}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		return Restore(ctx, Request{Input: info.Path, Output: out, Engine: e, Info: info, Segments: segments, CheckpointEvery: 0.5,
			Encode: video.EncodeOptions{Codec: "ffv1"}, Resume: rs})
	}
	framemd5 := func(path string) string {
		return string(runTool(t, "ffmpeg", "-nostdin", "-v", "error", "-i", path, "-map", "0", "-f", "framemd5", "-"))
	}
	refuse := false // the engines made refuse their states
	newEngine := func(started *int) *causalEngine {
		return &causalEngine{chunk: 4, lag: 3, started: started, refuse: refuse}
	}
	out := filepath.Join(dir, "out.mkv")
	jdir := JournalDir(out)

	// stop runs until the journal first names a state at output frame at
	// or after (with two segments, the parts of the second may be done
	// first: the journal then skips to a later state), fails the run
	// there and returns the state's frame.
	stop := func(segments, at int) (from int) {
		t.Helper()
		journaled = func(j *journal.Journal) error {
			if j.State != nil && j.State.Frame >= int64(at) {
				from = int(j.State.Frame)
				return errInterrupted
			}
			return nil
		}
		defer func() { journaled = nil }()
		if _, err := restore(out, segments, newEngine(nil)); !errors.Is(err, errInterrupted) {
			t.Fatalf("run stopped at frame %d: %v", at, err)
		}
		if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("output visible after an interrupted run: %v", err)
		}
		return from
	}
	// chunksAfter is the chunks run after resuming at the checkpoint at
	// output frame from: checkpoint k is after chunk 2k+2 of 8.
	chunksAfter := func(from int) int {
		if k := slices.Index(cps, from); k >= 0 {
			return 8 - (2*k + 3)
		}
		return 8
	}
	resume := func(segments int, want string, from int, notice string) {
		t.Helper()
		started := 0
		e := newEngine(&started)
		res, err := restore(out, segments, e)
		if err != nil {
			t.Fatal(err)
		}
		if got := framemd5(out); got != want {
			t.Errorf("resumed at %d: frames\n%s\ndiffer from an uninterrupted run's\n%s", from, got, want)
		}
		if res.ResumedFrom != from || res.Frames != 30 {
			t.Errorf("ResumedFrom %d of %d frames, want %d of 30", res.ResumedFrom, res.Frames, from)
		}
		if saves := from < cps[len(cps)-1]; saves != (res.Stages.Checkpoint > 0) {
			t.Errorf("resumed at %d: checkpoint_seconds %g (states saved: %v)", from, res.Stages.Checkpoint, saves)
		}
		if chunks := chunksAfter(from); started != chunks || (e.loads > 0) != (from > 0) {
			t.Errorf("resumed at %d: %d chunks run, %d states loaded; want %d chunks", from, started, e.loads, chunks)
		}
		if n := strings.Join(notices, "\n"); !strings.Contains(n, notice) {
			t.Errorf("notices %q, want %q", n, notice)
		}
		if _, err := os.Lstat(jdir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("journal directory left after success: %v", err)
		}
		os.Remove(out)
	}
	for _, segments := range []int{1, 2} {
		ref := filepath.Join(dir, fmt.Sprintf("ref%d.mkv", segments))
		if _, err := restore(ref, segments, newEngine(nil)); err != nil {
			t.Fatal(err)
		}
		want := framemd5(ref)
		if !strings.Contains(want, "\n1,") {
			t.Fatalf("no audio in the reference: %s", want)
		}
		for _, at := range cps {
			from := stop(segments, at)
			resume(segments, want, from, fmt.Sprintf("resuming at frame %d of 30", from))
		}
		if segments == 2 {
			break
		}
		// A torn journal.json: the one before it names the state before.
		stop(segments, cps[1])
		if err := os.WriteFile(filepath.Join(jdir, journal.FileName), []byte(`{"format":"vsr-journal","sha`), 0o600); err != nil {
			t.Fatal(err)
		}
		resume(segments, want, cps[0], "took the previous checkpoint")
		// A damaged state file: no state to resume from.
		stop(segments, cps[1])
		s, err := journal.Open(jdir)
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Load(journal.LoadOptions{})
		s.Close()
		if err != nil || l.Journal.State == nil {
			t.Fatalf("journal %v: %v", l, err)
		}
		sf := filepath.Join(jdir, l.Journal.State.File)
		data, err := os.ReadFile(sf)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 1
		if err := os.WriteFile(sf, data, 0o600); err != nil {
			t.Fatal(err)
		}
		resume(segments, want, 0, "journal set aside: it holds no usable state")
		// A state the engine refuses (of another shape: settings the
		// journal does not tell apart): set aside, and a fresh start.
		stop(segments, cps[1])
		refuse = true
		resume(segments, want, 0, "journal set aside: the model cannot resume from its saved state (a state of another shape)")
		refuse = false
	}
}

// TestResumeCausalNoCheckpoint: a causal engine that can save its state
// after no batch of the video (CDA-VSR with no forced reset after the
// first frame) keeps no journal, though its output goes to two encoders:
// there would be nothing to resume from.
func TestResumeCausalNoCheckpoint(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mkv")
	ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10", "-t", "3", "-c:v", "libx264", in)
	info := probeWith(t, in)
	t.Cleanup(func() { journaled = nil })
	journaled = func(j *journal.Journal) error { return fmt.Errorf("journaled %d parts", len(j.Parts)) }
	out := filepath.Join(dir, "out.mkv")
	// Chunks of 40 frames: one batch, no checkpoint.
	res, err := Restore(context.Background(), Request{Input: info.Path, Output: out, Engine: &causalEngine{chunk: 40, lag: 3}, Info: info,
		Segments: 2, CheckpointEvery: 0.5, Encode: video.EncodeOptions{Codec: "ffv1"}, Resume: &Resume{Model: "causal"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Frames != 30 {
		t.Errorf("%d frames", res.Frames)
	}
}

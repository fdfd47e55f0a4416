package cdavsr

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
)

// The resume tests' clip: 45 frames of gw x gh, key frames 0, 13 and 27,
// a scene cut on frame 35; with --reset-every 10 the forced resets are
// 0, 10, 13, 20, 27, 30 and 40, and the batches of 8 the plan had before
// it cut at them would have straddled all but the first.
const (
	rframes = 45
	rcut    = 35
)

var rkeys = map[int]bool{0: true, 13: true, 27: true}

// resumeClip makes the clip as RGB24: a crop of the test frame panning
// right two pixels every three frames, then from frame rcut on another
// scene (the crop inverted at half contrast, panning down a pixel a
// frame), whose first frame's residual is far above SceneCut on the CPU.
func resumeClip(t testing.TB) []byte {
	src, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	var rgb []byte
	for k := range rframes {
		for y := range gh {
			for x := range gw {
				for c := range 3 {
					if k < rcut {
						rgb = append(rgb, src[(y*48+x+2*k/3)*3+c])
					} else {
						rgb = append(rgb, 255-src[((y+k-rcut)*48+x+4)*3+c]/2)
					}
				}
			}
		}
	}
	return rgb
}

// resumeVideo is the clip's description, with its key frames.
func resumeVideo() model.Video {
	v := model.Video{Width: gw, Height: gh, Frames: rframes, Keys: make([]bool, rframes)}
	for k := range rkeys {
		v.Keys[k] = true
	}
	return v
}

// resumeParams are the parameters of the tests' sessions: set over the
// family's defaults.
func resumeParams(set model.Values) model.Params {
	return model.Params{Set: set, Default: model.Defaults(family{}.Params())}
}

// open makes a session of m for v with set.
func open(t testing.TB, m model.Model, v model.Video, set model.Values) *session {
	t.Helper()
	s, err := m.NewSession(context.Background(), v, resumeParams(set))
	if err != nil {
		t.Fatal(err)
	}
	return s.(*session)
}

// runBatches restores batches [from, to) of plan of the clip rgb through
// s and returns their output frames (RGB24).
func runBatches(t testing.TB, s *session, plan []int, from, to int, rgb []byte) []byte {
	t.Helper()
	bt, err := s.NewBatch(slices.Max(plan), gw, gh, backend.RGB24, backend.RGB24)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Free()
	ow, oh := s.OutputSize(gw, gh)
	at := 0
	for _, k := range plan[:from] {
		at += k
	}
	var out []byte
	for _, k := range plan[from:to] {
		copy(bt.In(), rgb[at*gw*gh*3:(at+k)*gw*gh*3])
		if err := s.Start(context.Background(), bt, k); err != nil {
			t.Fatal(err)
		}
		if err := bt.Wait(); err != nil {
			t.Fatal(err)
		}
		out = append(out, bt.Out()[:k*ow*oh*3]...)
		at += k
	}
	return out
}

// resumeAt runs batches 0..i of s's plan of the clip, saves the state,
// loads it into a new session of mb (made by the same parameters) that
// restores the rest, and returns the output frames of both with the new
// session's Resets.
func resumeAt(t testing.TB, s *session, mb model.Model, v model.Video, set model.Values, rgb []byte, i int) ([]byte, int) {
	t.Helper()
	plan, _ := s.Plan(v.Frames)
	out := runBatches(t, s, plan, 0, i+1, rgb)
	var st bytes.Buffer
	if err := s.SaveState(&st); err != nil {
		t.Fatalf("after batch %d: %v", i, err)
	}
	r := open(t, mb, v, set)
	defer r.Close()
	if err := r.LoadState(&st); err != nil {
		t.Fatalf("after batch %d: %v", i, err)
	}
	return append(out, runBatches(t, r, plan, i+1, len(plan), rgb)...), r.Resets
}

// spread picks at most n of xs, spread over them, the first and the last
// included where n > 1, the middle one where n is 1.
func spread(xs []int, n int) []int {
	switch {
	case len(xs) <= n:
		return xs
	case n == 1:
		return xs[len(xs)/2 : len(xs)/2+1]
	}
	var out []int
	for j := range n {
		out = append(out, xs[j*(len(xs)-1)/(n-1)])
	}
	return out
}

// resumes runs the clip through a session of ma never stopped, then
// stopped after batches for which Checkpoint says yes (at most n, one
// with -short, spread over the clip, and those before frames also) and
// resumed in a session of mb: the frames and the resets counts are the
// same, bit for bit. It returns the frames restored before each
// checkpoint, and the uninterrupted run's output and Resets.
func resumes(t testing.TB, ma, mb model.Model, v model.Video, set model.Values, rgb []byte, n int, also ...int) (at []int, whole []byte, resets int) {
	t.Helper()
	s := open(t, ma, v, set)
	plan, err := s.Plan(v.Frames)
	if err != nil {
		t.Fatal(err)
	}
	var points []int
	for i := range plan {
		if out, ok := s.Checkpoint(v.Frames, i); ok {
			points, at = append(points, i), append(at, out)
		}
	}
	whole = runBatches(t, s, plan, 0, len(plan), rgb)
	resets = s.Resets
	s.Close()
	if testing.Short() {
		n = 1
	}
	picked := spread(points, n)
	for _, f := range also {
		if j := slices.Index(at, f); j >= 0 && !slices.Contains(picked, points[j]) {
			picked = append(picked, points[j])
		}
	}
	for _, i := range picked {
		s := open(t, ma, v, set)
		got, r := resumeAt(t, s, mb, v, set, rgb, i)
		s.Close()
		out := at[slices.Index(points, i)]
		if !bytes.Equal(got, whole) {
			t.Errorf("%v: resumed at frame %d, the output differs from the run never stopped", set, out)
		}
		if r != resets {
			t.Errorf("%v: resumed at frame %d, %d resets; the run never stopped has %d", set, out, r, resets)
		}
	}
	return at, whole, resets
}

// cpuModel loads the synthetic checkpoint at x2 on the CPU.
func cpuModel(t testing.TB) model.Model {
	m, err := family{}.Load(cpu.New(0), synthFile(t, t.TempDir(), 2, nil, ""), model.Params{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestResume: the plan cuts before every forced reset (--reset-every, key
// frames) without changing the output; a run stopped there and resumed in
// a new session gives the frames of a run never stopped, scene cut and
// all; with the side data read from a dump, the scene cut is a checkpoint
// too; without forced resets there is none.
func TestResume(t *testing.T) {
	m := cpuModel(t)
	rgb, v := resumeClip(t), resumeVideo()
	set := model.Values{"reset-every": 10}
	s := open(t, m, v, set)
	plan, _ := s.Plan(rframes)
	s.Close()
	if want := []int{5, 5, 3, 7, 7, 3, 5, 5, 5}; !slices.Equal(plan, want) {
		t.Errorf("plan %v, want %v", plan, want)
	}
	at, whole, resets := resumes(t, m, m, v, set, rgb, 4)
	if want := []int{10, 13, 20, 27, 30, 40}; !slices.Equal(at, want) {
		t.Errorf("checkpoints before frames %v, want %v", at, want)
	}
	if resets != 8 {
		t.Errorf("%d resets, want 8: 7 forced and the scene cut on frame %d", resets, rcut)
	}
	// Batches of 8, as the plan was before it cut at resets: the same
	// frames.
	s = open(t, m, v, set)
	eights := []int{8, 8, 8, 8, 8, 5}
	if got := runBatches(t, s, eights, 0, len(eights), rgb); !bytes.Equal(got, whole) {
		t.Error("batches of 8 give other frames than the plan's")
	}
	s.Close()

	// Key frames only, 20 and 25 frames apart: batches of 8 at most, of
	// sizes one apart.
	keys := v
	keys.Keys = make([]bool, rframes)
	keys.Keys[0], keys.Keys[20] = true, true
	none := model.Values{"reset-every": 0}
	s = open(t, m, keys, none)
	plan, _ = s.Plan(rframes)
	s.Close()
	if want := []int{7, 7, 6, 7, 6, 6, 6}; !slices.Equal(plan, want) {
		t.Errorf("key frames 0 and 20: plan %v, want %v", plan, want)
	}
	if at, _, _ := resumes(t, m, m, keys, none, rgb, 1); !slices.Equal(at, []int{20}) {
		t.Errorf("key frames 0 and 20: checkpoints before frames %v, want [20]", at)
	}
	// No forced reset after frame 0: nowhere to resume.
	keys.Keys = nil
	s = open(t, m, keys, none)
	for i := range 6 {
		if _, ok := s.Checkpoint(rframes, i); ok {
			t.Errorf("reset-every 0 without key frames: batch %d is a checkpoint", i)
		}
	}
	s.Close()

	// The side data dumped, and read back: the scene cut is in the
	// dump's resets.txt, so the run can resume there too.
	dump := t.TempDir()
	s = open(t, m, v, model.Values{"reset-every": 10, "dump-side-data": dump})
	plan, _ = s.Plan(rframes)
	if got := runBatches(t, s, plan, 0, len(plan), rgb); !bytes.Equal(got, whole) {
		t.Error("dumping the side data changes the frames")
	}
	s.Close()
	read := model.Values{"reset-every": 10, "side-data": dump}
	at, got, r := resumes(t, m, m, v, read, rgb, 2, rcut)
	if !bytes.Equal(got, whole) || r != resets {
		t.Errorf("side data read back: other frames, or %d resets (want %d)", r, resets)
	}
	if want := []int{10, 13, 20, 27, 30, 35, 40}; !slices.Equal(at, want) {
		t.Errorf("side data read back: checkpoints before frames %v, want %v", at, want)
	}
}

// TestResumeDump: a run that dumps its side data, stopped and resumed
// into the same folder, leaves the dump of a run never stopped.
func TestResumeDump(t *testing.T) {
	m := cpuModel(t)
	rgb, v := resumeClip(t), resumeVideo()
	whole := t.TempDir()
	s := open(t, m, v, model.Values{"reset-every": 10, "dump-side-data": whole})
	plan, _ := s.Plan(rframes)
	want := runBatches(t, s, plan, 0, len(plan), rgb)
	s.Close()
	dir := t.TempDir()
	set := model.Values{"reset-every": 10, "dump-side-data": dir}
	s = open(t, m, v, set)
	got, _ := resumeAt(t, s, m, v, set, rgb, 3) // before frame 20
	s.Close()
	if !bytes.Equal(got, want) {
		t.Error("resumed while dumping: other frames")
	}
	files, _ := os.ReadDir(whole)
	if len(files) != 2*(rframes-8)+1 {
		t.Fatalf("the dump has %d files, want %d", len(files), 2*(rframes-8)+1)
	}
	for _, f := range files {
		a, _ := os.ReadFile(filepath.Join(whole, f.Name()))
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("resumed dump: %s differs from the run never stopped's (%v)", f.Name(), err)
		}
	}
}

// TestResumeRefusals: a state is refused, saying why, when it is damaged,
// of another version, size, parameters or video, loaded after Start, or
// saved where the recurrence may not restart; a dump that lacks the
// frames before the state is refused too.
func TestResumeRefusals(t *testing.T) {
	m := cpuModel(t)
	rgb, v := resumeClip(t), resumeVideo()
	set := model.Values{"reset-every": 10}
	// save returns the state after batch i of a session with set.
	save := func(set model.Values, i int) []byte {
		s := open(t, m, v, set)
		defer s.Close()
		plan, _ := s.Plan(rframes)
		runBatches(t, s, plan, 0, i+1, rgb)
		var b bytes.Buffer
		if err := s.SaveState(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	st := save(set, 2) // before key frame 13
	load := func(what string, v model.Video, set model.Values, st []byte, want string) {
		t.Helper()
		s := open(t, m, v, set)
		defer s.Close()
		if err := s.LoadState(bytes.NewReader(st)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %q", what, err, want)
		}
	}
	flip := bytes.Clone(st)
	flip[len(flip)/2] ^= 1
	load("a flipped bit", v, set, flip, "damaged (its checksum does not match)")
	load("truncated", v, set, st[:len(st)-3], "damaged")
	load("empty", v, set, nil, "not a CDA-VSR session's")
	load("garbage", v, set, bytes.Repeat([]byte("x"), len(st)), "not a CDA-VSR session's")
	version := bytes.Clone(st)
	binary.LittleEndian.PutUint32(version[8:], stateVersion+1)
	binary.LittleEndian.PutUint32(version[len(version)-4:], crc32.ChecksumIEEE(version[:len(version)-4]))
	load("another version", v, set, version, "of version 2; this build reads version 1")
	wide := v
	wide.Width = 32
	load("another size", wide, set, st, "of a session of 24x16 at x2, reset-every 10, mv-range 16, side data computed; this one is of 32x16")
	load("another reset-every", v, model.Values{"reset-every": 13}, st, "this one is of 24x16 at x2, reset-every 13")
	load("dumped vs computed", v, model.Values{"reset-every": 10, "dump-side-data": t.TempDir()}, st, "side data computed and dumped")
	noKeys := v
	noKeys.Keys = nil
	load("another video's key frames", noKeys, set, st, "resumes at frame 13 with 2 resets, which is no forced reset of this session")

	s := open(t, m, v, set)
	plan, _ := s.Plan(rframes)
	runBatches(t, s, plan, 0, 1, rgb)
	if err := s.SaveState(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no state to save before frame 5") {
		t.Errorf("saved between resets: %v", err)
	}
	if err := s.LoadState(bytes.NewReader(st)); err == nil || !strings.Contains(err.Error(), "before its first Start") {
		t.Errorf("loaded after Start: %v", err)
	}
	s.Close()

	// A dump that lost a frame written before the state was saved.
	dir := t.TempDir()
	dumps := model.Values{"reset-every": 10, "dump-side-data": dir}
	st = save(dumps, 2)
	os.Remove(filepath.Join(dir, mvName(3)))
	load("a dump without frame 3", v, dumps, st, "lacks mv_00003.npy of the run being resumed")
}

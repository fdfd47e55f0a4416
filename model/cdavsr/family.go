package cdavsr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
)

func init() { model.Register(family{}) }

// family is CDA-VSR: a .safetensors file recognised by its content.
type family struct{}

func (family) Name() string        { return "cdavsr" }
func (family) StorageType() string { return "" }

// Detect takes a regular file that reads as a CDA-VSR checkpoint.
func (family) Detect(spec string) bool {
	st, err := os.Stat(spec)
	return err == nil && st.Mode().IsRegular() && Sniff(spec)
}

// SceneCut is the mean absolute residual (in luma ranges) above which a
// frame starts a new scene and the recurrence restarts.
const SceneCut = 0.12

func (family) About() model.About {
	return model.About{Title: "CDA-VSR", Spec: "a CDA-VSR .safetensors file"}
}

func (family) Params() []model.Param {
	return []model.Param{
		{Name: "reset-every", Kind: model.Int, Default: 25,
			Help: "CDA-VSR: restart the recurrence (the I path) every N frames, as the authors' online test (0: only on key frames and scene cuts)"},
		{Name: "mv-range", Kind: model.Int, Default: 16,
			Help: "CDA-VSR: motion search range in input pixels (8x8 blocks, then half- and quarter-pel refinement)"},
		{Name: "graphs", Kind: model.String, Default: "on",
			Help: "CUDA graphs, on or off to queue every op each time: CDA-VSR, its I and P steps"},
		{Name: "side-data", Kind: model.String, Local: true,
			Help: "CDA-VSR: read the side data from DIR instead of computing it: per frame, numbered from 0 in display order, NumPy float32 files mv_00000.npy (2,H,W: x then y, in input pixels, the previous frame's pixel each came from) and res_00000.npy (1,H,W: the luma residual already divided by the luma range), the values exactly as the network takes them; the recurrence then restarts on frame 0, every --reset-every frames and on the frames listed in DIR/resets.txt (no key-frame or scene-cut detection)"},
		{Name: "dump-side-data", Kind: model.String, Local: true,
			Help: "CDA-VSR: write the side data vsr computes into DIR in --side-data's format, with resets.txt listing the frames it restarted on (reading the dump back gives the same output)"},
	}
}

// Load checks the checkpoint against the contract and loads it onto dev.
func (family) Load(dev backend.Backend, spec string, p model.Params) (model.Model, error) {
	n, err := Load(dev, spec)
	if err != nil {
		return nil, err
	}
	return &resident{net: n, name: "cdavsr:" + filepath.Base(spec), def: p}, nil
}

// resident is the loaded network; each video gets its own Instance.
type resident struct {
	net  *Net
	name string
	def  model.Params
	mu   sync.Mutex // one instance steps at a time on the shared weights
}

func (m *resident) Name() string { return m.name }

func (m *resident) Describe() map[string]any {
	gate := "1+w"
	if m.net.Sigmoid {
		gate = GateSigmoid
	}
	return map[string]any{"name": m.name, "family": "cdavsr", "sr_ratios": []int{m.net.Scale}, "gate": gate}
}

func (m *resident) Close() { m.net.Close() }

// FrameSize is the input times the network's scale (model.Sizer).
func (m *resident) FrameSize(v model.Video, _ model.Params) (int, int, error) {
	return v.Width * m.net.Scale, v.Height * m.net.Scale, nil
}

func (m *resident) NewSession(_ context.Context, v model.Video, p model.Params) (model.Session, error) {
	get := func(name string) int {
		if x, ok := p.Set[name].(int); ok {
			return x
		}
		if x, ok := m.def.Set[name].(int); ok {
			return x
		}
		return p.Int(name)
	}
	every, rng := get("reset-every"), get("mv-range")
	str := func(name string) string {
		if x, ok := p.Set[name].(string); ok {
			return x
		}
		x, _ := m.def.Set[name].(string)
		return x
	}
	sideDir, dumpDir := str("side-data"), str("dump-side-data")
	graphs := str("graphs")
	if graphs == "" {
		graphs = p.String("graphs")
	}
	if graphs != "on" && graphs != "off" && graphs != "" {
		return nil, model.Refuse("graphs", "", graphs, "want on or off")
	}
	if sideDir != "" && dumpDir != "" {
		return nil, fmt.Errorf("--side-data and --dump-side-data: give one (a dump of read side data is a copy of it)")
	}
	var callerResets map[int]bool
	if sideDir != "" {
		st, err := os.Stat(sideDir)
		if err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--side-data %s: not a folder of side data", sideDir)
		}
		if callerResets, err = readResets(filepath.Join(sideDir, "resets.txt")); err != nil {
			return nil, err
		}
	}
	if dumpDir != "" {
		if err := os.MkdirAll(dumpDir, 0o755); err != nil {
			return nil, fmt.Errorf("--dump-side-data: %w", err)
		}
	}
	if every < 0 {
		return nil, model.Refuse("reset-every", "", every, "want 0 (never) or a frame count")
	}
	if rng < 0 || rng > 64 {
		return nil, model.Refuse("mv-range", "", rng, "want 0 to 64 pixels")
	}
	if z, ok := p.Size("size"); ok && (z.W != v.Width*m.net.Scale || z.H != v.Height*m.net.Scale) {
		return nil, fmt.Errorf("size %dx%d: CDA-VSR makes x%d, %dx%d from the %dx%d input", z.W, z.H, m.net.Scale, v.Width*m.net.Scale, v.Height*m.net.Scale, v.Width, v.Height)
	}
	in, err := m.net.OpenWith(v.Width, v.Height, graphs != "off")
	if err != nil {
		return nil, err
	}
	s := &session{m: m, in: in, w: v.Width, h: v.Height, every: every, rng: rng,
		sideDir: sideDir, dumpDir: dumpDir, callerResets: callerResets}
	for _, k := range v.Keys {
		if !k { // a stream with inter frames: its key frames restart the recurrence
			s.keys = v.Keys
			break
		}
	}
	return s, nil
}

// session restores one video frame by frame through its Instance,
// computing the side data from the decoded frames.
type session struct {
	m     *resident
	in    *Instance
	w, h  int
	every int
	rng   int // the motion search range
	keys  []bool
	frame int            // frames restored so far
	prev  backend.Tensor // the last frame's luma
	// Caller-supplied side data (sideDir, with its resets), or a dump of
	// what vsr computes (dumpDir, with the frames reset on).
	sideDir, dumpDir string
	callerResets     map[int]bool
	dumped           []int
	planned          *planned // the last plan made (see plan)
	// Resets counts the frames restored on the I path.
	Resets int
}

func (s *session) OutputSize(w, h int) (int, int) { return w * s.m.net.Scale, h * s.m.net.Scale }

// Plan takes the video in batches of up to 8 frames, which Start restores
// one after the other, cut before every forced reset (see forced): the
// points a run can resume at (Checkpoint). The frames from one forced
// reset to the next go in as few batches as hold them, of sizes that
// differ by one at most. Frames are restored one after another whatever
// the batches, so the plan does not change the output.
func (s *session) Plan(total int) ([]int, error) {
	plan, _ := s.plan(total)
	return slices.Clone(plan), nil
}

// maxBatch is the most frames Plan puts in a batch.
const maxBatch = 8

// plan returns Plan(total) and, at each i, ends[i], the input frames of
// batches 0..i; it is made once per total (Checkpoint asks for every
// batch).
func (s *session) plan(total int) (plan, ends []int) {
	if s.planned != nil && s.planned.total == total {
		return s.planned.sizes, s.planned.ends
	}
	p := &planned{total: total}
	for at := 0; at < total; {
		next := at + 1
		for next < total && !s.forced(next) {
			next++
		}
		span := next - at
		n := (span + maxBatch - 1) / maxBatch
		for j := range n {
			size := span / n
			if j < span%n {
				size++
			}
			p.sizes = append(p.sizes, size)
			p.ends = append(p.ends, at+size)
			at += size
		}
	}
	s.planned = p
	return p.sizes, p.ends
}

// planned is a plan made for a total, with its batches' ends.
type planned struct {
	total       int
	sizes, ends []int
}

// forced reports whether frame restarts the recurrence whatever its
// content: the first frame, every --reset-every frames, and the key
// frames of a stream with inter frames, or with --side-data the frames
// listed in its resets.txt instead of the key frames. (A scene cut is
// decided from the frame's residual against the frame before.)
func (s *session) forced(frame int) bool {
	switch {
	case frame == 0, s.every > 0 && frame%s.every == 0:
		return true
	case s.sideDir != "":
		return s.callerResets[frame]
	default:
		return frame < len(s.keys) && s.keys[frame]
	}
}

// LiveBatch takes a live stream one frame at a time: CDA-VSR's latency.
func (s *session) LiveBatch(int) int { return 1 }

// End needs nothing more of the session: each frame is restored as it
// comes.
func (s *session) End(int) (bool, error) { return false, nil }

// batch is a batch's staging: on a GPU, page-locked host buffers with
// device copies, the conversion to the output's pixel format on the GPU.
type batch struct {
	backend.Slot
	in, f backend.PixelFormat
}

func (s *session) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	if w != s.w || h != s.h {
		return nil, fmt.Errorf("cdavsr: a batch of %dx%d frames for a session of %dx%d", w, h, s.w, s.h)
	}
	ow, oh := s.OutputSize(w, h)
	if err := f.CheckSize(ow, oh); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	slot, err := backend.NewSlot(s.m.net.b, n*in.FrameBytes(w, h), n*f.FrameBytes(ow, oh))
	if err != nil {
		return nil, err
	}
	return &batch{Slot: slot, in: in, f: f}, nil
}

// Start restores the first k frames of the batch in order and queues
// their conversion and copy back. The side data of all k frames is queued
// first, the scene cuts among them are found with one wait for the device
// (MeanAbs), and then the network's steps are queued: a wait per frame
// left the GPU idle while the host looked at each residual.
func (s *session) Start(ctx context.Context, bt backend.Batch, k int) error {
	b, ok := bt.(*batch)
	if !ok {
		return fmt.Errorf("cdavsr: batch %T was not made by this session", bt)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	net := s.m.net
	bk := net.b
	x, err := net.input(b.Slot, k, s.h, s.w, b.in)
	if err != nil {
		return err
	}
	defer x.Free()
	ow, oh := s.OutputSize(s.w, s.h)
	out, err := net.empty(backend.Shape{N: k, H: oh, W: ow, C: 3})
	if err != nil {
		return err
	}
	defer out.Free()
	fw := make([]frameWork, k)
	defer func() {
		for i := range fw {
			fw[i].free()
		}
	}()
	prev := s.prev
	var cuts []backend.Tensor // residuals that decide a scene cut
	var cutAt []int
	for i := range fw {
		f := &fw[i]
		if f.x, err = bk.Frames(x, i, 1); err != nil {
			return err
		}
		if err := s.side(f, s.frame+i, prev); err != nil {
			return fmt.Errorf("frame %d: %w", s.frame+i, err)
		}
		prev = f.luma
		if f.luma != nil && f.res != nil {
			cuts, cutAt = append(cuts, f.res), append(cutAt, i)
		}
	}
	if len(cuts) > 0 {
		means, err := bk.(backend.Motion).MeanAbs(cuts...)
		if err != nil {
			return err
		}
		for j, i := range cutAt {
			fw[i].reset = means[j] > SceneCut
		}
	}
	for i := range fw {
		if err := ctx.Err(); err != nil {
			return err
		}
		y, err := s.step(&fw[i])
		if err == nil {
			err = bk.CopyFrames(out, i, y)
			y.Free()
		}
		if err != nil {
			return fmt.Errorf("frame %d: %w", s.frame, err)
		}
	}
	_, err = backend.Output(b, out, b.f)
	return err
}

// frameWork is one frame of a batch from its side data to its step.
type frameWork struct {
	x, luma, mv, res backend.Tensor
	reset            bool
}

func (f *frameWork) free() {
	for _, t := range []backend.Tensor{f.x, f.luma, f.mv, f.res} {
		if t != nil {
			t.Free()
		}
	}
	*f = frameWork{}
}

// side finds frame's side data against prev (the last frame's luma) and
// whether it restarts the recurrence, short of a scene cut (Start decides
// those from the residuals): computed, with f.luma for the next frame, or
// read from sideDir.
func (s *session) side(f *frameWork, frame int, prev backend.Tensor) error {
	var err error
	f.reset = s.forced(frame)
	if s.sideDir != "" {
		if !f.reset {
			f.mv, f.res, err = s.readSide(frame)
		}
		return err
	}
	if f.reset {
		prev = nil // no motion search
	}
	f.luma, f.mv, f.res, err = s.m.net.sideData(f.x, prev, s.rng)
	return err
}

// step restores frame s.frame through the instance; its luma becomes the
// previous frame's.
func (s *session) step(f *frameWork) (backend.Tensor, error) {
	if s.dumpDir != "" {
		if err := s.dump(f.mv, f.res, f.reset); err != nil {
			return nil, err
		}
	}
	y, err := s.in.Step(f.x, f.mv, f.res, f.reset)
	if err != nil {
		return nil, err
	}
	if s.prev != nil {
		s.prev.Free()
	}
	s.prev, f.luma = f.luma, nil
	if f.reset {
		s.Resets++
	}
	s.frame++
	return y, nil
}

// readSide reads frame's side data from sideDir.
func (s *session) readSide(frame int) (backend.Tensor, backend.Tensor, error) {
	net := s.m.net
	n := s.w * s.h
	mvc, err := readNPY(filepath.Join(s.sideDir, mvName(frame)), []int{2, s.h, s.w})
	if err != nil {
		return nil, nil, fmt.Errorf("side data of frame %d: %w", frame, err)
	}
	rv, err := readNPY(filepath.Join(s.sideDir, resName(frame)), []int{1, s.h, s.w})
	if err != nil {
		return nil, nil, fmt.Errorf("side data of frame %d: %w", frame, err)
	}
	mv := make([]float32, 2*n) // (2,H,W) to NHWC
	for i := 0; i < n; i++ {
		mv[2*i], mv[2*i+1] = mvc[i], mvc[n+i]
	}
	mt, err := net.Upload(backend.Shape{N: 1, H: s.h, W: s.w, C: 2}, mv)
	if err != nil {
		return nil, nil, err
	}
	rt, err := net.Upload(backend.Shape{N: 1, H: s.h, W: s.w, C: 1}, rv)
	if err != nil {
		mt.Free()
		return nil, nil, err
	}
	return mt, rt, nil
}

// dump writes the current frame's side data (or notes its reset) into
// dumpDir.
func (s *session) dump(mv, res backend.Tensor, reset bool) error {
	if reset {
		s.dumped = append(s.dumped, s.frame)
		return writeResets(filepath.Join(s.dumpDir, "resets.txt"), s.dumped)
	}
	bk := s.m.net.b
	m, err := bk.Download(mv)
	if err != nil {
		return err
	}
	r, err := bk.Download(res)
	if err != nil {
		return err
	}
	n := s.w * s.h
	mvc := make([]float32, 2*n) // NHWC to (2,H,W)
	for i := 0; i < n; i++ {
		mvc[i], mvc[n+i] = m[2*i], m[2*i+1]
	}
	if err := writeNPY(filepath.Join(s.dumpDir, mvName(s.frame)), []int{2, s.h, s.w}, mvc); err != nil {
		return err
	}
	return writeNPY(filepath.Join(s.dumpDir, resName(s.frame)), []int{1, s.h, s.w}, r)
}

// readResets reads the frame numbers of a resets.txt (one per line; a
// missing file is none).
func readResets(path string) (map[int]bool, error) {
	d, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for i, line := range strings.Split(string(d), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		n, err := strconv.Atoi(line)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s line %d: %q is not a frame number", path, i+1, line)
		}
		out[n] = true
	}
	return out, nil
}

func writeResets(path string, frames []int) error {
	var b strings.Builder
	for _, f := range frames {
		fmt.Fprintln(&b, f)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func (s *session) Close() {
	s.in.Close()
	if s.prev != nil {
		s.prev.Free()
		s.prev = nil
	}
}

// The contract's optional capabilities that CDA-VSR implements (see
// package model).
var (
	_ model.Family    = family{}
	_ model.Inspector = family{}
	_ model.Synther   = family{}
	_ model.Sizer     = (*resident)(nil)
	_ model.Planner   = (*session)(nil)
	_ model.Streamer  = (*session)(nil)
	_ model.Resumer   = (*session)(nil)
)

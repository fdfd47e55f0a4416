package cdavsr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

func (family) Params() []model.Param {
	return []model.Param{
		{Name: "reset-every", Kind: model.Int, Default: 25,
			Help: "CDA-VSR: restart the recurrence (the I path) every N frames, as the authors' online test (0: only on key frames and scene cuts)"},
		{Name: "mv-range", Kind: model.Int, Default: 16,
			Help: "CDA-VSR: motion search range in input pixels (8x8 blocks, then half- and quarter-pel refinement)"},
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
	if every < 0 {
		return nil, fmt.Errorf("reset_every (--reset-every) %d: want 0 (never) or a frame count", every)
	}
	if rng < 0 || rng > 64 {
		return nil, fmt.Errorf("mv_range (--mv-range) %d: want 0 to 64 pixels", rng)
	}
	if z, ok := p.Size("size"); ok && (z.W != v.Width*m.net.Scale || z.H != v.Height*m.net.Scale) {
		return nil, fmt.Errorf("size %dx%d: CDA-VSR makes x%d, %dx%d from the %dx%d input", z.W, z.H, m.net.Scale, v.Width*m.net.Scale, v.Height*m.net.Scale, v.Width, v.Height)
	}
	in, err := m.net.Open(v.Width, v.Height)
	if err != nil {
		return nil, err
	}
	s := &session{m: m, in: in, w: v.Width, h: v.Height, every: every, rng: rng}
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
	// Resets counts the frames restored on the I path.
	Resets int
}

func (s *session) OutputSize(w, h int) (int, int) { return w * s.m.net.Scale, h * s.m.net.Scale }

// Plan takes the video in batches of up to 8 frames, which Start restores
// one after the other.
func (s *session) Plan(total int) ([]int, error) {
	var plan []int
	for total > 0 {
		n := min(total, 8)
		plan = append(plan, n)
		total -= n
	}
	return plan, nil
}

// batch is a batch's staging: on a GPU, page-locked host buffers with
// device copies, the conversion to the output's pixel format on the GPU.
type batch struct {
	backend.Slot
	f backend.PixelFormat
}

func (s *session) NewBatch(n, w, h int, f backend.PixelFormat) (backend.Batch, error) {
	if w != s.w || h != s.h {
		return nil, fmt.Errorf("cdavsr: a batch of %dx%d frames for a session of %dx%d", w, h, s.w, s.h)
	}
	ow, oh := s.OutputSize(w, h)
	if f == backend.YUV420P && (ow%2 != 0 || oh%2 != 0) {
		return nil, fmt.Errorf("yuv420p needs an even output size, not %dx%d", ow, oh)
	}
	slot, err := backend.NewSlot(s.m.net.b, n*w*h*3, n*f.FrameBytes(ow, oh))
	if err != nil {
		return nil, err
	}
	return &batch{Slot: slot, f: f}, nil
}

// Start restores the first k frames of the batch in order and queues
// their conversion and copy back.
func (s *session) Start(ctx context.Context, bt backend.Batch, k int) error {
	b, ok := bt.(*batch)
	if !ok {
		return fmt.Errorf("cdavsr: batch %T was not made by this session", bt)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	bk := s.m.net.b
	x, err := b.Input(k, s.h, s.w)
	if err != nil {
		return err
	}
	defer x.Free()
	ow, oh := s.OutputSize(s.w, s.h)
	out, err := bk.Empty(backend.Shape{N: k, H: oh, W: ow, C: 3})
	if err != nil {
		return err
	}
	defer out.Free()
	for i := 0; i < k; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		xi, err := bk.Frames(x, i, 1)
		if err != nil {
			return err
		}
		y, err := s.step(xi)
		xi.Free()
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

// step restores one frame: side data against the previous frame, the
// reset decision, the network.
func (s *session) step(x backend.Tensor) (backend.Tensor, error) {
	bk := s.m.net.b
	reset := s.frame == 0 || (s.every > 0 && s.frame%s.every == 0) || (s.frame < len(s.keys) && s.keys[s.frame])
	prev := s.prev
	if reset {
		prev = nil // no motion search
	}
	luma, mv, res, err := s.m.net.sideData(x, prev, s.rng)
	if err != nil {
		return nil, err
	}
	if mv != nil {
		defer mv.Free()
		defer res.Free()
		cut, err := sceneCut(bk, res)
		if err != nil {
			luma.Free()
			return nil, err
		}
		reset = cut
	}
	y, err := s.in.Step(x, mv, res, reset)
	if err != nil {
		luma.Free()
		return nil, err
	}
	if s.prev != nil {
		s.prev.Free()
	}
	s.prev = luma
	if reset {
		s.Resets++
	}
	s.frame++
	return y, nil
}

// sceneCut reports whether the mean absolute residual passes SceneCut.
func sceneCut(b backend.Backend, res backend.Tensor) (bool, error) {
	v, err := b.Download(res)
	if err != nil {
		return false, err
	}
	var sum float64
	for _, r := range v {
		sum += float64(max(r, -r))
	}
	return sum/float64(len(v)) > SceneCut, nil
}

func (s *session) Close() {
	s.in.Close()
	if s.prev != nil {
		s.prev.Free()
		s.prev = nil
	}
}

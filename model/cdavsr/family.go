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
	s := &session{m: m, in: in, w: v.Width, h: v.Height, every: every,
		match: Matcher{W: v.Width, H: v.Height, Block: 8, Range: rng},
		prev:  make([]float32, v.Width*v.Height), cur: make([]float32, v.Width*v.Height),
		mv: make([]float32, 2*v.Width*v.Height), res: make([]float32, v.Width*v.Height)}
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
	keys  []bool
	match Matcher
	frame int // frames restored so far
	// Luma of the previous and current frames, and the side data.
	prev, cur, mv, res []float32
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

type hostBatch struct {
	in, out, rgb []byte
	f            backend.PixelFormat
}

func (b *hostBatch) In() []byte  { return b.in }
func (b *hostBatch) Out() []byte { return b.out }
func (b *hostBatch) Wait() error { return nil }
func (b *hostBatch) Free()       {}

func (s *session) NewBatch(n, w, h int, f backend.PixelFormat) (backend.Batch, error) {
	if w != s.w || h != s.h {
		return nil, fmt.Errorf("cdavsr: a batch of %dx%d frames for a session of %dx%d", w, h, s.w, s.h)
	}
	ow, oh := s.OutputSize(w, h)
	if f == backend.YUV420P && (ow%2 != 0 || oh%2 != 0) {
		return nil, fmt.Errorf("yuv420p needs an even output size, not %dx%d", ow, oh)
	}
	b := &hostBatch{in: make([]byte, n*w*h*3), out: make([]byte, n*f.FrameBytes(ow, oh)), f: f}
	if f != backend.RGB24 {
		b.rgb = make([]byte, n*ow*oh*3)
	}
	return b, nil
}

// Start restores the first k frames of the batch in order.
func (s *session) Start(ctx context.Context, bt backend.Batch, k int) error {
	b, ok := bt.(*hostBatch)
	if !ok {
		return fmt.Errorf("cdavsr: batch %T was not made by this session", bt)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	ow, oh := s.OutputSize(s.w, s.h)
	rgb := b.out
	if b.rgb != nil {
		rgb = b.rgb
	}
	fb, ob := s.w*s.h*3, ow*oh*3
	for i := 0; i < k; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.step(b.in[i*fb:][:fb], rgb[i*ob:][:ob]); err != nil {
			return fmt.Errorf("frame %d: %w", s.frame, err)
		}
	}
	if b.f == backend.YUV420P {
		backend.RGBToYUV420(b.out, rgb[:k*ob], k, ow, oh)
	}
	return nil
}

// step restores one frame: side data against the previous frame, the
// reset decision, the network.
func (s *session) step(frame, out []byte) error {
	bk := s.m.net.b
	Luma(frame, s.cur)
	reset := s.frame == 0 || (s.every > 0 && s.frame%s.every == 0) || (s.frame < len(s.keys) && s.keys[s.frame])
	if !reset {
		s.match.Estimate(s.cur, s.prev, s.mv, s.res)
		var sum float64
		for _, r := range s.res {
			sum += float64(max(r, -r))
		}
		reset = sum/float64(len(s.res)) > SceneCut
	}
	x, err := bk.FromRGB8(frame, 1, s.h, s.w)
	if err != nil {
		return err
	}
	defer x.Free()
	var mv, res backend.Tensor
	if !reset {
		if mv, err = bk.Upload(backend.Shape{N: 1, H: s.h, W: s.w, C: 2}, s.mv); err != nil {
			return err
		}
		defer mv.Free()
		if res, err = bk.Upload(backend.Shape{N: 1, H: s.h, W: s.w, C: 1}, s.res); err != nil {
			return err
		}
		defer res.Free()
	}
	y, err := s.in.Step(x, mv, res, reset)
	if err != nil {
		return err
	}
	defer y.Free()
	if err := bk.ToRGB8(y, out); err != nil {
		return err
	}
	if reset {
		s.Resets++
	}
	s.prev, s.cur = s.cur, s.prev
	s.frame++
	return nil
}

func (s *session) Close() { s.in.Close() }

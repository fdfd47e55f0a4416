package cdavsr

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

// conv is one convolution's prepared weights and geometry.
type conv struct {
	w backend.Weights
	p backend.ConvParams
}

// resBlock is x + conv2(relu(conv1(x))).
type resBlock struct{ c1, c2 conv }

// Net is the CDA-VSR network on a backend. Its layers are plain fields;
// it holds no per-video state (see Instance).
type Net struct {
	b backend.Backend
	// wide holds the inputs, outputs and recurrent state in float32 when
	// the storage type is narrower (as CDA-VSR's reference runtime keeps
	// them in its fp16 engines); nil when every tensor is float32.
	wide    backend.Wide
	Scale   int
	Sigmoid bool // the gate is aligned*sigmoid(w), not aligned*(1+w)

	first  conv
	fe     []resBlock
	offset [4]conv // deform_align.conv_offset.{0,2,4,6}
	dcn    conv
	weight [3]conv // conv_weight_l.{0,2,4}
	fuse   conv    // convs.0
	recI   []resBlock
	recP   []resBlock
	h      conv
	up     conv
	luma   conv // RGB to luma, for the side data (unset with wide: luma32)
	// separateTail runs the output's tail (pixel shuffle, bilinear base,
	// sum) as separate ops on a BilinearShuffleAdder too, for the tests'
	// comparison.
	separateTail bool
}

// Load checks the checkpoint at path against the contract (header only)
// and then loads its 179 tensors onto b.
func Load(b backend.Backend, path string) (*Net, error) {
	c, err := Inspect(path, 0, 0)
	if err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := &Net{b: b, wide: backend.WideOf(b), Scale: c.Scale, Sigmoid: c.Gate == GateSigmoid}
	var lerr error
	get := func(name string, k int) conv {
		if lerr != nil {
			return conv{}
		}
		w, err := f.Float32(c.Prefix + name + ".weight")
		if err != nil {
			lerr = err
			return conv{}
		}
		shape := shapes(c.Scale)[name+".weight"]
		if name == "deform_align.conv_offset.0" {
			w, shape = padInputs(w, shape, offsetInPadded)
		}
		var bias []float32
		if _, ok := shapes(c.Scale)[name+".bias"]; ok {
			if bias, err = f.Float32(c.Prefix + name + ".bias"); err != nil {
				lerr = err
				return conv{}
			}
		}
		for _, v := range w {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				lerr = fmt.Errorf("%s: %s%s.weight holds NaN or infinite values", path, c.Prefix, name)
				return conv{}
			}
		}
		pw, err := b.PrepareConv(shape[0], shape[1], k, k, w, bias)
		if err != nil {
			lerr = fmt.Errorf("%s: %w", name, err)
			return conv{}
		}
		pad := k / 2
		return conv{w: pw, p: backend.ConvParams{KH: k, KW: k, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1, PadT: pad, PadL: pad, PadB: pad, PadR: pad}}
	}
	blocks := func(prefix string, count int) []resBlock {
		var rb []resBlock
		for i := 0; i < count; i++ {
			rb = append(rb, resBlock{get(fmt.Sprintf("%s.%d.conv1", prefix, i), 3), get(fmt.Sprintf("%s.%d.conv2", prefix, i), 3)})
		}
		return rb
	}
	n.first = get("conv_first", 3)
	n.fe = blocks("feature_extraction", blocksFE)
	for i, k := range []int{3, 3, 3, 1} {
		n.offset[i] = get(fmt.Sprintf("deform_align.conv_offset.%d", 2*i), k)
	}
	n.dcn = get("deform_align.dcn", 1)
	for i := range n.weight {
		n.weight[i] = get(fmt.Sprintf("conv_weight_l.%d", 2*i), 1)
	}
	n.fuse = get("convs.0", 3)
	n.recI = blocks("reconstruction_I", blocksI)
	n.recP = blocks("reconstruction_P", blocksP)
	n.h = get("conv_h", 3)
	n.up = get("upconv1", 3)
	if lerr == nil && n.wide == nil { // beside narrower storage the luma is float32 (luma32)
		n.luma, lerr = lumaConv(b)
	}
	if lerr != nil {
		n.Close()
		return nil, lerr
	}
	if _, ok := b.(backend.Motion); !ok {
		n.Close()
		return nil, fmt.Errorf("device %s lacks the motion ops CDA-VSR needs (warp, deformable sampling); run it with --device cpu", b.Name())
	}
	return n, nil
}

// Close frees the weights.
func (n *Net) Close() {
	all := []conv{n.first, n.dcn, n.fuse, n.h, n.up, n.luma}
	all = append(all, n.offset[:]...)
	all = append(all, n.weight[:]...)
	for _, rb := range [][]resBlock{n.fe, n.recI, n.recP} {
		for _, r := range rb {
			all = append(all, r.c1, r.c2)
		}
	}
	for _, c := range all {
		if c.w != nil {
			c.w.Free()
		}
	}
	*n = Net{}
}

// The offset branch's input is the warped state, the features and the
// motion field: 194 channels, held in a buffer of 200 whose last 6 stay
// zero (Instance.offIn) and read with zero weights, so that every part is
// copied 16 bytes at a time and the convolution needs no padding pass.
const (
	offsetIn       = 2*features + features + 2
	offsetInPadded = 200
)

// padInputs returns OIHW weights of shape with the input channels padded
// with zeros to in, and the new shape.
func padInputs(w []float32, shape []int, in int) ([]float32, []int) {
	o, i, k := shape[0], shape[1], shape[2]*shape[3]
	p := make([]float32, o*in*k)
	for a := 0; a < o; a++ {
		copy(p[a*in*k:], w[a*i*k:(a+1)*i*k])
	}
	return p, []int{o, in, shape[2], shape[3]}
}

var (
	relu   = backend.Activation{Kind: backend.ActReLU}
	lrelu  = backend.Activation{Kind: backend.ActLeaky, Alpha: 0.1}
	linear = backend.Activation{}
)

// Upload makes an input tensor for Instance.Step: float32, the values
// kept exactly, also beside a narrower storage type.
func (n *Net) Upload(s backend.Shape, data []float32) (backend.Tensor, error) {
	if n.wide != nil {
		return n.wide.UploadF32(s, data)
	}
	return n.b.Upload(s, data)
}

// input is s.Input in float32 (see Net.wide).
func (n *Net) input(s backend.Slot, k, h, w int, f backend.PixelFormat) (backend.Tensor, error) {
	if ws, ok := s.(backend.WideSlot); ok && n.wide != nil {
		return ws.InputF32(k, h, w, f)
	}
	return s.Input(k, h, w, f)
}

// empty returns an uninitialised float32 tensor (see Net.wide).
func (n *Net) empty(s backend.Shape) (backend.Tensor, error) {
	if n.wide != nil {
		return n.wide.EmptyF32(s)
	}
	return n.b.Empty(s)
}

// isF32 reports whether t is of the type of the instance's inputs.
func (n *Net) isF32(t backend.Tensor) bool { return n.wide == nil || n.wide.IsF32(t) }

// narrow returns x, float32, in the storage type for the layers: a new
// tensor beside a narrower storage type, else x itself.
func (n *Net) narrow(x backend.Tensor) (t backend.Tensor, made bool, err error) {
	if n.wide == nil {
		return x, false, nil
	}
	t, err = n.wide.Convert(x, false)
	return t, err == nil, err
}

// blocks runs residual blocks on x, consuming it.
func (n *Net) blocks(x backend.Tensor, rb []resBlock) (backend.Tensor, error) {
	for _, r := range rb {
		h, err := n.b.Conv2D(x, r.c1.w, r.c1.p, relu)
		if err != nil {
			x.Free()
			return nil, err
		}
		y, err := n.b.Conv2DAdd(h, r.c2.w, r.c2.p, linear, x)
		h.Free()
		x.Free()
		if err != nil {
			return nil, err
		}
		x = y
	}
	return x, nil
}

// concat stacks tensors of one size along channels.
func (n *Net) concat(ts ...backend.Tensor) (backend.Tensor, error) {
	s := ts[0].Shape()
	s.C = 0
	for _, t := range ts {
		s.C += t.Shape().C
	}
	y, err := n.b.Empty(s)
	if err != nil {
		return nil, err
	}
	at := 0
	for _, t := range ts {
		if err := n.b.CopyChannels(y, at, t); err != nil {
			y.Free()
			return nil, err
		}
		at += t.Shape().C
	}
	return y, nil
}

// step runs one frame: x (1 H W 3) in [0,1]; on the P path, state (1 H W
// 128: feat then conv_h of the last frame), mv (1 H W 2) and res (1 H W 1),
// and offIn, the offset branch's input buffer (1 H W offsetInPadded,
// zero beyond offsetIn). It writes the new state into next and returns the
// output frame. x, state, mv, res, next and the output are float32 (see
// Net.wide): the layers read them narrowed, the warps read mv as it is,
// and the output is the float32 bilinear base plus the network's part.
func (n *Net) step(x, state, mv, res, offIn, next backend.Tensor, iPath bool) (backend.Tensor, error) {
	b := n.b
	var free []backend.Tensor
	defer func() {
		for _, t := range free {
			t.Free()
		}
	}()
	keep := func(t backend.Tensor, err error) (backend.Tensor, error) {
		if err == nil {
			free = append(free, t)
		}
		return t, err
	}
	narrow := func(t backend.Tensor) (backend.Tensor, error) {
		y, made, err := n.narrow(t)
		if made {
			free = append(free, y)
		}
		return y, err
	}
	xs, err := narrow(x)
	if err != nil {
		return nil, err
	}
	f0, err := b.Conv2D(xs, n.first.w, n.first.p, linear)
	if err != nil {
		return nil, err
	}
	feat, err := keep(n.blocks(f0, n.fe))
	if err != nil {
		return nil, err
	}
	var rec backend.Tensor
	if iPath {
		feat2, err := b.Frames(feat, 0, 1) // blocks consume their input; feat is kept for the state
		if err != nil {
			return nil, err
		}
		if rec, err = keep(n.blocks(feat2, n.recI)); err != nil {
			return nil, err
		}
	} else {
		mb := b.(backend.Motion)
		if state, err = narrow(state); err != nil { // exact: its values came from the layers
			return nil, err
		}
		warped, err := keep(mb.WarpNearest(state, mv))
		if err != nil {
			return nil, err
		}
		t, at := offIn, 0
		for _, part := range []backend.Tensor{warped, feat, mv} {
			if err := b.CopyChannels(t, at, part); err != nil {
				return nil, err
			}
			at += part.Shape().C
		}
		for i, c := range n.offset {
			act := lrelu
			if i == len(n.offset)-1 {
				act = linear
			}
			if t, err = keep(b.Conv2D(t, c.w, c.p, act)); err != nil {
				return nil, err
			}
		}
		sampled, err := keep(mb.DeformSample(state, t, mv, Groups, OffsetLimit))
		if err != nil {
			return nil, err
		}
		aligned, err := keep(b.Conv2D(sampled, n.dcn.w, n.dcn.p, linear))
		if err != nil {
			return nil, err
		}
		w, err := narrow(res)
		if err != nil {
			return nil, err
		}
		for i, c := range n.weight {
			act := lrelu
			if i == len(n.weight)-1 {
				act = linear
			}
			if w, err = keep(b.Conv2D(w, c.w, c.p, act)); err != nil {
				return nil, err
			}
		}
		gated, err := keep(mb.Gate(aligned, w, n.Sigmoid))
		if err != nil {
			return nil, err
		}
		cat, err := keep(n.concat(gated, feat))
		if err != nil {
			return nil, err
		}
		fused, err := b.Conv2D(cat, n.fuse.w, n.fuse.p, linear)
		if err != nil {
			return nil, err
		}
		if rec, err = keep(n.blocks(fused, n.recP)); err != nil {
			return nil, err
		}
	}
	hs, err := keep(b.Conv2D(rec, n.h.w, n.h.p, linear))
	if err != nil {
		return nil, err
	}
	if err := b.CopyChannels(next, 0, feat); err != nil {
		return nil, err
	}
	if err := b.CopyChannels(next, features, hs); err != nil {
		return nil, err
	}
	u, err := keep(b.Conv2D(rec, n.up.w, n.up.p, linear))
	if err != nil {
		return nil, err
	}
	if sa, ok := b.(backend.BilinearShuffleAdder); ok && !n.separateTail {
		return sa.ShuffleAddBilinear(u, x, n.Scale, backend.ShuffleCRD)
	}
	sh, err := keep(b.PixelShuffle(u, n.Scale, backend.ShuffleCRD))
	if err != nil {
		return nil, err
	}
	if n.wide != nil {
		if sh, err = keep(n.wide.Convert(sh, true)); err != nil {
			return nil, err
		}
	}
	s := x.Shape()
	base, err := keep(b.Resize(x, backend.Bilinear, s.H*n.Scale, s.W*n.Scale, backend.Tile{}, backend.Tile{}))
	if err != nil {
		return nil, err
	}
	return b.Binary(backend.OpAdd, sh, base)
}

// Synthesize returns the 179 tensors of a random CDA-VSR network at scale
// s (deterministic for a seed), scaled so that activations stay of order
// one through the residual blocks and the recurrence.
func Synthesize(s int, seed uint64) []safetensors.WriteTensor {
	r := rand.New(rand.NewPCG(seed, 0x63646176))
	m := shapes(s)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []safetensors.WriteTensor
	for _, name := range names {
		shape := m[name]
		count := 1
		for _, d := range shape {
			count *= d
		}
		fanIn := 1
		if len(shape) == 4 {
			fanIn = shape[1] * shape[2] * shape[3]
		} else {
			w := m[name[:len(name)-len("bias")]+"weight"]
			fanIn = w[1] * w[2] * w[3]
		}
		bound := float32(math.Sqrt(3 / float64(fanIn)))
		switch {
		case len(shape) == 1:
			bound *= 0.1
		case strings.Contains(name, ".conv2.") || strings.Contains(name, "conv_offset.6") || strings.Contains(name, "conv_weight_l.4"):
			bound *= 0.1
		}
		v := make([]float32, count)
		for i := range v {
			v[i] = bound * (2*r.Float32() - 1)
		}
		out = append(out, safetensors.WriteTensor{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.Float32Bytes(v)})
	}
	return out
}

package compact

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/checkpoint/ncnn"
)

// ncnn's marker values for "pad to keep the size" in Convolution.
const (
	padSame      = -233
	padSameLower = -234
)

// samePadded reports whether a convolution keeps the image size and is
// centred, which is what exact tiling needs.
func samePadded(p backend.ConvParams) bool {
	return p.StrideH == 1 && p.StrideW == 1 &&
		p.PadT == p.PadB && p.PadL == p.PadR &&
		2*p.PadT == p.DilH*(p.KH-1) && 2*p.PadL == p.DilW*(p.KW-1)
}

// blockwise reports whether a convolution reads non-overlapping blocks,
// its kernel the size of its stride and no padding (a pixel unshuffle
// written as a convolution): its output is the input's size over the
// stride, and tiles whose origins are multiples of the stride are exact.
func blockwise(p backend.ConvParams) bool {
	return p.StrideH > 1 && p.StrideW > 1 && p.KH == p.StrideH && p.KW == p.StrideW &&
		p.DilH == 1 && p.DilW == 1 && p.PadT == 0 && p.PadB == 0 && p.PadL == 0 && p.PadR == 0
}

// convOp reads a Convolution layer: 0=num_output 1=kernel_w 11=kernel_h
// 2/12=dilation 3/13=stride 4/14/15/16=pad left/top/right/bottom
// 5=bias_term 6=weight_data_size 8=int8 9=activation 10=activation params.
func (m *Graph) convOp(o *op, wr *ncnn.WeightReader) error {
	l := o.layer
	out := l.Int(0, 0)
	kw := l.Int(1, 0)
	kh := l.Int(11, kw)
	p := backend.ConvParams{
		KH: kh, KW: kw,
		DilW: l.Int(2, 1), StrideW: l.Int(3, 1),
		PadL: l.Int(4, 0),
	}
	p.DilH = l.Int(12, p.DilW)
	p.StrideH = l.Int(13, p.StrideW)
	p.PadT = l.Int(14, p.PadL)
	p.PadR = l.Int(15, p.PadL)
	p.PadB = l.Int(16, p.PadT)
	wsize := l.Int(6, 0)
	if out <= 0 || kw <= 0 || kh <= 0 || kw > 31 || kh > 31 {
		return fmt.Errorf("bad num_output %d or kernel %dx%d", out, kw, kh)
	}
	if p.DilW <= 0 || p.DilH <= 0 || p.StrideW <= 0 || p.StrideH <= 0 {
		return fmt.Errorf("bad dilation %dx%d or stride %dx%d", p.DilW, p.DilH, p.StrideW, p.StrideH)
	}
	if l.Int(8, 0) != 0 {
		return fmt.Errorf("int8 convolution is not supported")
	}
	if l.Int(19, 0) != 0 {
		return fmt.Errorf("dynamic-weight convolution is not supported")
	}
	if l.Float(18, 0) != 0 {
		return fmt.Errorf("pad value %g is not supported (only zero padding)", l.Float(18, 0))
	}
	for _, pad := range []*int{&p.PadL, &p.PadT, &p.PadR, &p.PadB} {
		if *pad == padSame || *pad == padSameLower {
			if p.StrideH != 1 || p.StrideW != 1 || kh%2 == 0 || kw%2 == 0 {
				return fmt.Errorf("SAME padding is supported only for odd kernels with stride 1")
			}
			p.PadL, p.PadR = p.DilW*(kw-1)/2, p.DilW*(kw-1)/2
			p.PadT, p.PadB = p.DilH*(kh-1)/2, p.DilH*(kh-1)/2
			break
		}
		if *pad < 0 || *pad > 64 {
			return fmt.Errorf("bad padding %d", *pad)
		}
	}
	if wsize <= 0 || wsize%(out*kh*kw) != 0 {
		return fmt.Errorf("weight_data_size %d is not a multiple of %d outputs x %dx%d kernel", wsize, out, kw, kh)
	}
	in := wsize / (out * kh * kw)
	w, err := wr.Tagged(wsize, "weights")
	if err != nil {
		return err
	}
	var bias []float32
	if l.Int(5, 0) != 0 {
		if bias, err = wr.Raw(out, "bias"); err != nil {
			return err
		}
	}
	o.raw = &rawConv{out: out, in: in, kh: kh, kw: kw, w: w, bias: bias}
	o.kind, o.conv = opConv, p
	o.act, err = fusedAct(l)
	return err
}

// fusedAct reads a (de)convolution's fused activation: 9=activation_type
// (0 none, 1 ReLU, 2 leaky ReLU) 10=its parameters (leaky's slope).
func fusedAct(l *ncnn.Layer) (backend.Activation, error) {
	switch a := l.Int(9, 0); a {
	case 0:
		return backend.Activation{}, nil
	case 1:
		return backend.Activation{Kind: backend.ActReLU}, nil
	case 2:
		act := backend.Activation{Kind: backend.ActLeaky}
		if pp := l.Params[10]; len(pp.Floats) > 0 {
			act.Alpha = pp.Floats[0]
		}
		return act, nil
	default:
		return backend.Activation{}, fmt.Errorf("fused activation type %d is not supported (only none, ReLU, leaky ReLU)", a)
	}
}

// rawConv is a convolution's weights as read, kept until fusion is done
// (it may scale them) and they are prepared for the backend.
type rawConv struct {
	out, in, kh, kw int
	w, bias         []float32
}

// scale multiplies the weights and bias by c.
func (r *rawConv) scale(c float32) {
	for i := range r.w {
		r.w[i] *= c
	}
	for i := range r.bias {
		r.bias[i] *= c
	}
}

// preluOp reads a PReLU layer: 0=num_slope, then the slopes as raw floats.
func (m *Graph) preluOp(o *op, wr *ncnn.WeightReader) error {
	n := o.layer.Int(0, 0)
	if n <= 0 || n > 1<<16 {
		return fmt.Errorf("bad num_slope %d", n)
	}
	s, err := wr.Raw(n, "slopes")
	if err != nil {
		return err
	}
	t, err := m.b.Upload(backend.Shape{N: 1, H: 1, W: 1, C: n}, s)
	if err != nil {
		return err
	}
	m.owned = append(m.owned, t)
	o.kind, o.act = opAct, backend.Activation{Kind: backend.ActPReLU, Slope: t}
	return nil
}

// shuffleOp reads a PixelShuffle layer: 0=upscale_factor 1=mode (0 is
// PyTorch's channel order, 1 is depth_to_space's).
func shuffleOp(o *op) error {
	o.kind, o.r = opShuffle, o.layer.Int(0, 1)
	if o.r < 1 || o.r > 16 {
		return fmt.Errorf("bad upscale_factor %d", o.r)
	}
	switch mode := o.layer.Int(1, 0); mode {
	case 0:
		o.order = backend.ShuffleCRD
	case 1:
		o.order = backend.ShuffleDCR
	default:
		return fmt.Errorf("unknown pixel shuffle mode %d", mode)
	}
	return nil
}

// resizeOp reads an Interp layer: 0=resize_type (1 nearest, 2 bilinear,
// 3 bicubic) 1=height_scale 2=width_scale 3/4=output size 5=dynamic
// 6=align_corner.
func resizeOp(o *op) error {
	l := o.layer
	modes := map[int]backend.ResizeMode{1: backend.Nearest, 2: backend.Bilinear, 3: backend.Bicubic}
	mode, ok := modes[l.Int(0, 0)]
	if !ok {
		return fmt.Errorf("unsupported resize_type %d (1 nearest, 2 bilinear, 3 bicubic are supported)", l.Int(0, 0))
	}
	if l.Int(3, 0) != 0 || l.Int(4, 0) != 0 || l.Int(5, 0) != 0 {
		return fmt.Errorf("a fixed or dynamic output size is not supported; only scale factors")
	}
	if l.Int(6, 0) != 0 {
		return fmt.Errorf("align_corner=1 is not supported")
	}
	o.kind, o.mode = opResize, mode
	o.hs, o.ws = l.Float(1, 1), l.Float(2, 1)
	if !(o.hs > 0 && o.hs <= 16 && o.ws > 0 && o.ws <= 16) {
		return fmt.Errorf("bad scale %gx%g", o.ws, o.hs)
	}
	return nil
}

// reorgOp reads a Reorg layer (space to depth): 0=stride 1=mode (0 is
// PyTorch's pixel_unshuffle channel order, c*s*s + i*s + j for the pixel
// at (i, j) of each s x s block; 1 is depth_to_space's inverse,
// (i*s + j)*C + c). vsr runs it as a convolution with an s x s kernel
// and stride s whose weights pick one pixel each (reorgWeights): exact in
// every dtype, tiled exactly (blockwise), on every backend.
func reorgOp(o *op) error {
	s := o.layer.Int(0, 1)
	if s < 2 || s > 8 {
		return fmt.Errorf("bad stride %d (2 to 8 are supported)", s)
	}
	if m := o.layer.Int(1, 0); m != 0 && m != 1 {
		return fmt.Errorf("unknown reorg mode %d", m)
	}
	o.kind = opConv
	o.conv = backend.ConvParams{KH: s, KW: s, StrideH: s, StrideW: s, DilH: 1, DilW: 1}
	return nil
}

// reorgWeights are the weights of a Reorg by s of c channels in mode
// (see reorgOp).
func reorgWeights(c, s, mode int) *rawConv {
	out := c * s * s
	w := make([]float32, out*c*s*s)
	for ch := 0; ch < c; ch++ {
		for i := 0; i < s; i++ {
			for j := 0; j < s; j++ {
				oc := ch*s*s + i*s + j
				if mode == 1 {
					oc = (i*s+j)*c + ch
				}
				w[((oc*c+ch)*s+i)*s+j] = 1
			}
		}
	}
	return &rawConv{out: out, in: c, kh: s, kw: s, w: w}
}

// concatOp reads a Concat layer: 0=axis (0, or -3, is channels for the
// 3-D blobs of an image model).
func concatOp(o *op) error {
	if a := o.layer.Int(0, 0); a != 0 && a != -3 {
		return fmt.Errorf("concatenation along axis %d is not supported (only channels, axis 0)", a)
	}
	o.kind = opConcat
	return nil
}

// eltwiseOp reads an Eltwise layer: 0=op_type (0 product, 1 sum, 2 max)
// 1=coefficients (an array, for sums).
func eltwiseOp(o *op) error {
	l := o.layer
	switch t := l.Int(0, 0); t {
	case 0:
		o.binop = backend.OpMul
	case 1:
		o.binop = backend.OpAdd
	default:
		return fmt.Errorf("unsupported op_type %d (product and sum are supported)", t)
	}
	o.kind = opEltwise
	if p, ok := l.Params[1]; ok && len(p.Floats) > 0 {
		if o.binop != backend.OpAdd {
			return fmt.Errorf("coefficients are only supported for sums")
		}
		if len(p.Floats) != len(l.Bottoms) {
			return fmt.Errorf("%d coefficients for %d inputs", len(p.Floats), len(l.Bottoms))
		}
		o.coef = p.Floats
	}
	return nil
}

// binaryOp reads a BinaryOp layer: 0=op_type (0 add, 1 sub, 2 mul)
// 1=with_scalar 2=b (the scalar). With a scalar it is a pointwise
// activation (x + b, x - b or x * b) of its one input.
func binaryOp(o *op) error {
	ops := map[int]backend.BinaryOp{0: backend.OpAdd, 1: backend.OpSub, 2: backend.OpMul}
	bo, ok := ops[o.layer.Int(0, 0)]
	if !ok {
		return fmt.Errorf("unsupported op_type %d (add, sub and mul are supported)", o.layer.Int(0, 0))
	}
	switch ws := o.layer.Int(1, 0); ws {
	case 0:
		o.kind, o.binop = opBinary, bo
	case 1:
		b := o.layer.Float(2, 0)
		o.kind = opAct
		switch bo {
		case backend.OpAdd:
			o.act = backend.Activation{Kind: backend.ActAddScalar, Alpha: b}
		case backend.OpSub:
			o.act = backend.Activation{Kind: backend.ActAddScalar, Alpha: -b}
		case backend.OpMul:
			o.act = backend.Activation{Kind: backend.ActMulScalar, Alpha: b}
		}
	default:
		return fmt.Errorf("bad with_scalar %d (0 or 1)", ws)
	}
	return nil
}

// pointwiseOp reads a weightless activation layer, Sigmoid or Swish
// (x * sigmoid(x), PyTorch's SiLU).
func pointwiseOp(o *op, kind backend.ActKind) error {
	o.kind, o.act = opAct, backend.Activation{Kind: kind}
	return nil
}

// reluOp reads a ReLU layer: 0=slope (leaky below zero when not 0).
func reluOp(o *op) error {
	o.kind, o.act = opAct, backend.Activation{Kind: backend.ActReLU}
	if a := o.layer.Float(0, 0); a != 0 {
		o.act = backend.Activation{Kind: backend.ActLeaky, Alpha: a}
	}
	return nil
}

// padOp reads a Padding layer: 0=top 1=bottom 2=left 3=right 4=type (0
// zeros, 2 reflection) 5=value (0); vsr's 21=multiple rounds the input's
// height and width up to a multiple of it with more padding at the bottom
// and right (Real-CUGAN's input, whose padding depends on its size).
func padOp(o *op) error {
	l := o.layer
	o.kind = opPad
	o.pad = [4]int{l.Int(0, 0), l.Int(1, 0), l.Int(2, 0), l.Int(3, 0)}
	for _, p := range o.pad {
		if p < 0 || p > 64 {
			return fmt.Errorf("bad padding %d (0 to 64)", p)
		}
	}
	switch t := l.Int(4, 0); t {
	case 0:
		o.padMode = backend.PadZero
	case 2:
		o.padMode = backend.PadReflect
	default:
		return fmt.Errorf("padding type %d is not supported (0 zeros and 2 reflection are)", t)
	}
	if v := l.Float(5, 0); v != 0 {
		return fmt.Errorf("pad value %g is not supported (only zeros)", v)
	}
	if o.multiple = l.Int(21, 1); o.multiple < 1 || o.multiple > 64 {
		return fmt.Errorf("bad multiple %d (1 to 64)", o.multiple)
	}
	return nil
}

// cropOp reads a Crop layer: 0=woffset 1=hoffset (pixels cropped from the
// left and top) 6=woffset2 7=hoffset2 (from the right and bottom); vsr's
// 21=1 crops the bottom and right to the graph input's size times the
// blob's scale (Real-CUGAN's output, made of an input rounded up). Channel
// crops and fixed output sizes are not supported.
func cropOp(o *op) error {
	l := o.layer
	for _, k := range []int{2, 3, 4, 8, 9, 10, 11} {
		if _, ok := l.Params[k]; ok && l.Int(k, 0) != 0 && !(k == 2 && l.Int(5, 0) > 0) {
			return fmt.Errorf("crop parameter %d is not supported (only woffset, hoffset, woffset2, hoffset2, or coffset with outc)", k)
		}
	}
	if outc := l.Int(5, 0); outc > 0 {
		// A channel crop: 2=coffset 5=outc, nothing spatial.
		for _, k := range []int{0, 1, 3, 4, 6, 7, 8, 21} {
			if l.Int(k, 0) != 0 {
				return fmt.Errorf("a channel crop (outc) with parameter %d is not supported", k)
			}
		}
		o.kind, o.at, o.n = opChannels, l.Int(2, 0), outc
		if o.at < 0 {
			return fmt.Errorf("bad coffset %d", o.at)
		}
		return nil
	}
	o.kind, o.padMode = opPad, backend.PadZero
	o.pad = [4]int{-l.Int(1, 0), -l.Int(7, 0), -l.Int(0, 0), -l.Int(6, 0)}
	for _, p := range o.pad {
		if p > 0 || p < -1<<12 {
			return fmt.Errorf("bad crop %d", -p)
		}
	}
	o.fit = l.Int(21, 0) == 1
	if o.fit && (o.pad[1] != 0 || o.pad[3] != 0) {
		return fmt.Errorf("a crop to the input's size takes no woffset2 or hoffset2")
	}
	return nil
}

// poolOp reads a Pooling layer; vsr runs global average pooling only:
// 0=pooling_type 1 (average), 4=global_pooling 1.
func poolOp(o *op) error {
	if o.layer.Int(0, 0) != 1 || o.layer.Int(4, 0) != 1 {
		return fmt.Errorf("only global average pooling is supported (pooling_type=1, global_pooling=1)")
	}
	o.kind = opMean
	return nil
}

// padded is the size an opPad makes of an ih x iw blob of scale sh x sw,
// in a graph whose input is h x w.
func (o *op) padded(ih, iw int, sh, sw rat, h, w int) (int, int) {
	k := max(o.multiple, 1)
	up := func(n int) int { return (n + k - 1) / k * k }
	oh, ow := up(ih)+o.pad[0]+o.pad[1], up(iw)+o.pad[2]+o.pad[3]
	if o.fit {
		fh, _ := sh.at(h)
		fw, _ := sw.at(w)
		oh, ow = min(oh, fh), min(ow, fw)
	}
	return oh, ow
}

// deconv adds the ops of a Deconvolution layer l (a transposed
// convolution; 0=num_output 1/11=kernel 2/12=dilation 3/13=stride
// 4/14/15/16=pad left/top/right/bottom, which crop the output, 5=bias_term
// 6=weight_data_size, 9/10=activation, 18/19=output padding; weights
// num_output x inputs x kh x kw) reading blob in, and returns its output
// blob. A transposed convolution of stride s is s*s convolutions of the
// input, one per output phase, which run as one convolution into s*s
// times the channels (zero padded or cropped first so that every phase
// reads its taps), a pixel shuffle by s, and a crop of what lies beyond
// the output.
func (m *Graph) deconv(l *ncnn.Layer, wr *ncnn.WeightReader, in int, emit func(*op, ...int) (int, error)) (int, error) {
	out, kw := l.Int(0, 0), l.Int(1, 0)
	kh := l.Int(11, kw)
	sw := l.Int(3, 1)
	sh := l.Int(13, sw)
	pl := l.Int(4, 0)
	pt, pr := l.Int(14, pl), l.Int(15, pl)
	pb := l.Int(16, pt)
	if out <= 0 || kw <= 0 || kh <= 0 || kw > 31 || kh > 31 || sw < 1 || sh < 1 || sw > 8 || sh > 8 {
		return 0, fmt.Errorf("bad num_output %d, kernel %dx%d or stride %dx%d", out, kw, kh, sw, sh)
	}
	if sh != sw || sw > min(kw, kh) {
		return 0, fmt.Errorf("strides %dx%d with a %dx%d kernel: only square strides no larger than the kernel are supported", sw, sh, kw, kh)
	}
	if l.Int(2, 1) != 1 || l.Int(12, 1) != 1 {
		return 0, fmt.Errorf("dilated transposed convolutions are not supported")
	}
	if l.Int(18, 0) != 0 || l.Int(19, 0) != 0 || l.Int(20, 0) != 0 || l.Int(21, 0) != 0 {
		return 0, fmt.Errorf("output padding and fixed output sizes are not supported")
	}
	for _, p := range []int{pl, pt, pr, pb} {
		if p < 0 || p >= 32 {
			return 0, fmt.Errorf("bad padding %d", p)
		}
	}
	wsize := l.Int(6, 0)
	if wsize <= 0 || wsize%(out*kh*kw) != 0 {
		return 0, fmt.Errorf("weight_data_size %d is not a multiple of %d outputs x %dx%d kernel", wsize, out, kw, kh)
	}
	cin := wsize / (out * kh * kw)
	if cin != m.chans[in] {
		return 0, fmt.Errorf("weights for %d input channels, the input has %d", cin, m.chans[in])
	}
	w, err := wr.Tagged(wsize, "weights")
	if err != nil {
		return 0, err
	}
	var bias []float32
	if l.Int(5, 0) != 0 {
		if bias, err = wr.Raw(out, "bias"); err != nil {
			return 0, err
		}
	}
	act, err := fusedAct(l)
	if err != nil {
		return 0, err
	}
	ay, ax := phasesOf(kh, sh, pt, pb), phasesOf(kw, sw, pl, pr)
	// The convolution: output channel c*s*s + i*s + j is phase (i, j) of
	// channel c (PyTorch's pixel shuffle order).
	oc := out * sh * sw
	cw := make([]float32, oc*cin*ay.taps*ax.taps)
	var cb []float32
	if bias != nil {
		cb = make([]float32, oc)
	}
	for c := 0; c < out; c++ {
		for i := 0; i < sh; i++ {
			for j := 0; j < sw; j++ {
				o := (c*sh+i)*sw + j
				if cb != nil {
					cb[o] = bias[c]
				}
				for _, ty := range ay.tap[i] {
					for _, tx := range ax.tap[j] {
						for ci := 0; ci < cin; ci++ {
							cw[((o*cin+ci)*ay.taps+ty.u)*ax.taps+tx.u] = w[((c*cin+ci)*kh+ty.k)*kw+tx.k]
						}
					}
				}
			}
		}
	}
	x := in
	if ay.lo != 0 || ay.hi != 0 || ax.lo != 0 || ax.hi != 0 {
		if x, err = emit(&op{layer: l, kind: opPad, pad: [4]int{ay.lo, ay.hi, ax.lo, ax.hi}, padMode: backend.PadZero}, x); err != nil {
			return 0, err
		}
	}
	conv := &op{layer: l, kind: opConv, act: act,
		conv: backend.ConvParams{KH: ay.taps, KW: ax.taps, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1},
		raw:  &rawConv{out: oc, in: cin, kh: ay.taps, kw: ax.taps, w: cw, bias: cb}}
	if x, err = emit(conv, x); err != nil {
		return 0, err
	}
	if x, err = emit(&op{layer: l, kind: opShuffle, r: sh, order: backend.ShuffleCRD}, x); err != nil {
		return 0, err
	}
	if ay.crop != 0 || ax.crop != 0 {
		x, err = emit(&op{layer: l, kind: opPad, pad: [4]int{0, -ay.crop, 0, -ax.crop}, padMode: backend.PadZero}, x)
	}
	return x, err
}

// phaseAxis is a transposed convolution along one axis as s phases of an
// ordinary one: output pixel s*i + a, for i from 0, is the sum over
// tap[a] of w[k] * in[i + u - lo], in zero-padded by lo before and hi
// after (negative: cropped), which a convolution of taps taps without
// padding computes for every phase at once; the phases then hold crop
// pixels beyond the output.
type phaseAxis struct {
	taps, lo, hi, crop int
	tap                [][]struct{ k, u int }
}

// phasesOf splits a transposed convolution of kernel k, stride s (at most
// k: every phase has a tap) and padding before and after (pixels cropped
// from its output) into phases.
// Output pixel o is input pixel j's tap o + before - s*j; for o = s*i + a
// and q = a + before = s*m + r, the taps are k = s*t + r at input pixel
// i + m - t. An input of n pixels gives (n-1)*s + k - before - after
// output pixels: n + ceil(e/s) phases with e = k - s - before - after,
// whatever n is, so the padding and the crop are constants.
func phasesOf(k, s, before, after int) phaseAxis {
	type tap = struct{ k, u int }
	var p phaseAxis
	dmin, dmax := 1<<30, -(1 << 30)
	ds := make([][]tap, s) // with u holding the offset d = m - t for now
	for a := 0; a < s; a++ {
		q := a + before
		m, r := q/s, q%s
		for t := 0; s*t+r < k; t++ {
			d := m - t
			ds[a] = append(ds[a], tap{k: s*t + r, u: d})
			dmin, dmax = min(dmin, d), max(dmax, d)
		}
	}
	for a := range ds {
		for i := range ds[a] {
			ds[a][i].u -= dmin
		}
	}
	e := k - s - before - after
	ce := -floorDiv(-e, s) // ceil(e / s)
	p.taps, p.tap = dmax-dmin+1, ds
	p.lo, p.hi, p.crop = -dmin, ce+dmax, s*ce-e
	return p
}

func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// normOp reads a GroupNorm layer (0=group 1=channels 2=eps 3=affine, 1:
// the scale then the shift as raw floats) or vsr's ChannelNorm, a
// LayerNorm over each pixel's channels (0=channels 1=eps, then the scale
// and shift), which ncnn has no layer for.
func (m *Graph) normOp(o *op, wr *ncnn.WeightReader) error {
	l := o.layer
	c := l.Int(1, 0)
	o.eps = l.Float(2, 1e-5)
	if l.Type == "GroupNorm" {
		o.groups = l.Int(0, 1)
		if o.groups < 1 {
			return fmt.Errorf("bad group %d", o.groups)
		}
		if l.Int(3, 1) != 1 {
			return fmt.Errorf("a GroupNorm without its affine scale and shift is not supported")
		}
	} else {
		c, o.eps = l.Int(0, 0), l.Float(1, 1e-5)
	}
	if c <= 0 || c > 1<<16 || !(o.eps > 0) {
		return fmt.Errorf("bad channels %d or eps %g", c, o.eps)
	}
	s := backend.Shape{N: 1, H: 1, W: 1, C: c}
	for _, t := range []*backend.Tensor{&o.scale, &o.shift} {
		v, err := wr.Raw(c, "scale and shift")
		if err != nil {
			return err
		}
		if *t, err = m.b.Upload(s, v); err != nil {
			return err
		}
		m.owned = append(m.owned, *t)
	}
	o.kind = opNorm
	return nil
}

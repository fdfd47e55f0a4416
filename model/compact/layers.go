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
	switch a := l.Int(9, 0); a {
	case 0:
	case 1:
		o.act = backend.Activation{Kind: backend.ActReLU}
	case 2:
		o.act = backend.Activation{Kind: backend.ActLeaky}
		if pp := l.Params[10]; len(pp.Floats) > 0 {
			o.act.Alpha = pp.Floats[0]
		}
	default:
		return fmt.Errorf("fused activation type %d is not supported (only none, ReLU, leaky ReLU)", a)
	}
	o.kind, o.conv = opConv, p
	return nil
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

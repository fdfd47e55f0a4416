package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	"github.com/vsr-dev/vsr/nvidia/cublaslt"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/tensor/half"
)

// upload32 copies float32 host values into a new device block.
func (b *Backend) upload32(data []float32) (*block, error) { return b.uploadBlock(cu.AsBytes(data)) }

// uploadBlock copies host bytes into a new device block.
func (b *Backend) uploadBlock(data []byte) (*block, error) {
	blk, err := b.pool.get(int64(len(data)))
	if err != nil {
		return nil, err
	}
	if err := b.compute.CopyHtoD(blk.ptr, data); err != nil {
		b.pool.put(blk)
		return nil, err
	}
	return blk, nil
}

// Upload makes a tensor from float32 host data.
func (b *Backend) Upload(s backend.Shape, data []float32) (backend.Tensor, error) {
	if len(data) != s.Elems() {
		return nil, fmt.Errorf("upload %v: got %d values", s, len(data))
	}
	f32, err := b.upload32(data)
	if err != nil {
		return nil, err
	}
	t, err := b.alloc(s)
	if err != nil {
		b.pool.put(f32)
		return nil, err
	}
	t.f32 = f32
	if err := b.launch("from_f32", true, int64(len(data)), f32.ptr, t.ptr(), int64(len(data))); err != nil {
		t.Free()
		return nil, err
	}
	// The host slice must stay valid until the copy ran.
	return t, b.compute.Synchronize()
}

// Download copies a tensor to the host as float32.
func (b *Backend) Download(tt backend.Tensor) ([]float32, error) {
	t, err := b.anyTensor(tt)
	if err != nil {
		return nil, err
	}
	n := int64(t.shape.Elems())
	src := t.ptr()
	if t.dt() != F32 {
		tmp, err := b.pool.get(n * 4)
		if err != nil {
			return nil, err
		}
		defer b.pool.put(tmp)
		if err := b.launch("to_f32", true, n, t.ptr(), tmp.ptr, n); err != nil {
			return nil, err
		}
		src = tmp.ptr
	}
	out := make([]float32, n)
	if err := b.compute.CopyDtoH(cu.AsBytes(out), src); err != nil {
		return nil, err
	}
	return out, b.compute.Synchronize()
}

// convWeights is a convolution's filter in KRSC (NHWC) layout in the
// storage type, and its bias in float32 and (biasT, for cuDNN's fused
// epilogue) in the storage type.
type convWeights struct {
	out, in, kh, kw int
	w, bias, biasT  *block
	b               *Backend
	// padded, when in or out is not a multiple of 8, is the same filter
	// with zero channels up to the next multiple of 8 (no bias), for
	// cuDNN's tensor-core kernels, which need 16-byte pixels.
	padded *convWeights
}

func (w *convWeights) Out() int { return w.out }
func (w *convWeights) In() int  { return w.in }
func (w *convWeights) Free() {
	if w.w != nil {
		w.b.pool.put(w.w)
		w.w = nil
	}
	for _, p := range []**block{&w.bias, &w.biasT} {
		if *p != nil {
			w.b.pool.put(*p)
			*p = nil
		}
	}
	if w.padded != nil {
		w.padded.Free()
		w.padded = nil
	}
}

// PrepareConv converts OIHW float32 weights to a KRSC filter.
func (b *Backend) PrepareConv(out, in, kh, kw int, w, bias []float32) (backend.Weights, error) {
	if err := check.ConvWeights(out, in, kh, kw, w, bias); err != nil {
		return nil, err
	}
	cw, err := b.filter(out, in, kh, kw, out, in, w)
	if err != nil {
		return nil, err
	}
	if pout, pin := (out+7)/8*8, (in+7)/8*8; pout != out || pin != in {
		if cw.padded, err = b.filter(out, in, kh, kw, pout, pin, w); err != nil {
			cw.Free()
			return nil, err
		}
	}
	if bias != nil {
		if cw.bias, err = b.upload32(bias); err != nil {
			cw.Free()
			return nil, err
		}
		if cw.biasT, err = b.uploadBlock(b.encode(bias)); err != nil {
			cw.Free()
			return nil, err
		}
	}
	return cw, b.compute.Synchronize()
}

// filter uploads OIHW weights (out x in x kh x kw) as a KRSC filter of
// pout x kh x kw x pin, zero beyond out and in.
func (b *Backend) filter(out, in, kh, kw, pout, pin int, w []float32) (*convWeights, error) {
	krsc := make([]float32, pout*kh*kw*pin)
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			for y := 0; y < kh; y++ {
				for x := 0; x < kw; x++ {
					krsc[((o*kh+y)*kw+x)*pin+i] = w[((o*in+i)*kh+y)*kw+x]
				}
			}
		}
	}
	blk, err := b.uploadBlock(b.encode(krsc))
	if err != nil {
		return nil, err
	}
	return &convWeights{out: pout, in: pin, kh: kh, kw: kw, w: blk, b: b}, nil
}

// encode converts float32 values to the storage type's bytes, rounding to
// nearest even.
func (b *Backend) encode(v []float32) []byte {
	if b.dtype == F32 {
		return cu.AsBytes(v)
	}
	return cu.AsBytes(half.EncodeSlice(v, b.dtype == BF16))
}

// actArgs returns the bias_act kernel's activation arguments.
func (b *Backend) actArgs(act backend.Activation) (kind int32, alpha float32, slope cu.DevicePtr, nslope int32, err error) {
	switch act.Kind {
	case backend.ActNone:
	case backend.ActReLU:
		kind = 1
	case backend.ActLeaky:
		kind, alpha = 2, act.Alpha
	case backend.ActSoftClamp:
		kind, alpha = 4, act.Alpha
	case backend.ActPReLU:
		st, ok := act.Slope.(*Tensor)
		if !ok || st.f32 == nil {
			return 0, 0, 0, 0, fmt.Errorf("prelu slopes must come from Upload")
		}
		kind, slope, nslope = 3, st.f32.ptr, int32(st.shape.Elems())
	default:
		return 0, 0, 0, 0, fmt.Errorf("unknown activation %d", act.Kind)
	}
	return
}

// Conv2D runs the convolution through cuDNN, then adds the bias and applies
// the activation in one pass (or cuDNN fuses them, see Conv2DAdd). A filter
// whose channel counts are not multiples of 8 runs padded: the input gets
// zero channels, and the pass after the convolution drops the padded
// outputs.
func (b *Backend) Conv2D(xt backend.Tensor, wt backend.Weights, p backend.ConvParams, act backend.Activation) (backend.Tensor, error) {
	return b.Conv2DAdd(xt, wt, p, act, nil)
}

// Conv2DAdd computes act(conv(x, w) + bias + res). With a bias, ReLU and
// no padded output channels, cuDNN fuses the bias, res and ReLU into the
// convolution (cudnnConvolutionBiasActivationForward); otherwise they take
// passes of their own.
func (b *Backend) Conv2DAdd(xt backend.Tensor, wt backend.Weights, p backend.ConvParams, act backend.Activation, rest backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	w, ok := wt.(*convWeights)
	if !ok {
		return nil, fmt.Errorf("cuda conv given %T weights", wt)
	}
	s := x.shape
	oh, ow, err := check.ConvOutput(s, p, w.in, w.kh, w.kw)
	if err != nil {
		return nil, err
	}
	ys := backend.Shape{N: s.N, H: oh, W: ow, C: w.out}
	var res *Tensor
	if rest != nil {
		if res, err = b.tensor(rest); err != nil {
			return nil, err
		}
		if res.shape != ys {
			return nil, fmt.Errorf("conv residual of shape %v, output %v", res.shape, ys)
		}
	}
	y, err := b.alloc(ys)
	if err != nil {
		return nil, err
	}
	switch {
	case res == nil && b.canFuse(w, p, act, ys):
		return b.finish(y, b.fusedConv(x, w, act, y))
	case res == nil && b.canGemm(p):
		return b.finish(y, b.conv1x1(x, w, act, y))
	case res == nil && b.canTaps(w, p):
		return b.finish(y, b.convTaps(x, w, act, y))
	}
	return b.finish(y, b.convCuDNN(x, w, p, act, res, y))
}

// canGemm reports whether a convolution is a plain matrix product that
// conv1x1 computes: 1x1, stride 1, no padding or dilation, fp16 storage.
// (cuDNN picked a generic kernel 20 times slower than the GEMM for
// CDA-VSR's 128 -> 128 deformable convolution. bf16, SwiftVR's ReAE,
// keeps cuDNN's choices, whose speed and error were measured.)
func (b *Backend) canGemm(p backend.ConvParams) bool {
	return b.dtype == F16 && unitConv(p, 1, 0)
}

// canTaps reports whether convTaps computes a convolution: 3x3, padding
// 1, stride 1, fp16 storage (as canGemm), channel counts multiples of 8
// (16-byte rows for the GEMM) and at least 9 inputs per output (the GEMM's
// output, 9 values per output channel, is then no larger than its input).
// cuDNN ran CDA-VSR's 194 -> 16 offset convolution at half the rate of
// GEMM and tap_sum.
func (b *Backend) canTaps(w *convWeights, p backend.ConvParams) bool {
	return b.dtype == F16 && unitConv(p, 3, 1) && w.padded == nil && 9*w.out <= w.in
}

// unitConv reports whether p is a k x k convolution of stride 1, without
// dilation, padded by pad on every side (Conv2DAdd has checked that the
// weights are k x k too).
func unitConv(p backend.ConvParams, k, pad int) bool {
	return p.KH == k && p.KW == k && p.StrideH == 1 && p.StrideW == 1 && p.DilH == 1 && p.DilW == 1 &&
		p.PadT == pad && p.PadB == pad && p.PadL == pad && p.PadR == pad
}

// gemmConv queues z = x · f as one cuBLASLt GEMM over the pixels of x
// (NHWC, the rows of A) and the KRSC filter f (its rows are B, transposed):
// z holds f.out values per pixel, plus bias (in z's type) when not 0.
func (b *Backend) gemmConv(x *Tensor, f *convWeights, bias cu.DevicePtr, z *Tensor) error {
	g, err := b.gemmRunner()
	if err != nil {
		return err
	}
	s := cublaslt.Shape{M: x.shape.N * x.shape.H * x.shape.W, N: f.out * f.kh * f.kw, K: f.in, TransB: true}
	if bias != 0 {
		s.Epilogue = cublaslt.EpilogueBias
	}
	pl, err := g.Plan(s)
	if err != nil {
		return err
	}
	return g.RunBias(pl, b.compute.Handle(), x.ptr(), f.w.ptr, z.ptr(), z.ptr(), bias, 1, 0)
}

// convTaps computes a 3x3 convolution with few outputs as a GEMM that
// gives each output channel's 9 taps per pixel (the KRSC filter read as
// 9*out rows), then tap_sum, which adds each output's taps from the 9
// neighbours with the bias and the activation.
func (b *Backend) convTaps(x *Tensor, w *convWeights, act backend.Activation, y *Tensor) error {
	z, err := b.alloc(backend.Shape{N: x.shape.N, H: x.shape.H, W: x.shape.W, C: 9 * w.out})
	if err != nil {
		return err
	}
	defer z.Free()
	if err := b.gemmConv(x, w, 0, z); err != nil {
		return err
	}
	kind, alpha, slope, nslope, err := b.actArgs(act)
	if err != nil {
		return err
	}
	var bias cu.DevicePtr
	if w.bias != nil {
		bias = w.bias.ptr
	}
	s := y.shape
	return b.launch("tap_sum", true, int64(s.Elems()), z.ptr(), y.ptr(), bias, int32(s.N), int32(s.H), int32(s.W), int32(s.C), kind, alpha, slope, nslope)
}

// conv1x1 computes a 1x1 convolution as one GEMM (gemmConv), the bias in
// its epilogue. Channel counts that are not multiples of 8 run padded:
// the input through pad_channels, the outputs into scratch; then, as for
// an activation, one more pass (biasAct) finishes y.
func (b *Backend) conv1x1(x *Tensor, w *convWeights, act backend.Activation, y *Tensor) error {
	cw, in, out := w, x, y
	var err error
	if w.padded != nil {
		cw = w.padded
		if in, err = b.padChannels(x, cw.in); err != nil {
			return err
		}
		if in != x {
			defer in.Free()
		}
		if cw.out != w.out {
			if out, err = b.alloc(backend.Shape{N: y.shape.N, H: y.shape.H, W: y.shape.W, C: cw.out}); err != nil {
				return err
			}
			defer out.Free()
		}
	}
	var bias cu.DevicePtr
	if out == y && w.biasT != nil {
		bias = w.biasT.ptr
	}
	if err := b.gemmConv(in, cw, bias, out); err != nil {
		return err
	}
	if out == y && act.Kind == backend.ActNone {
		return nil
	}
	kind, alpha, slope, nslope, err := b.actArgs(act)
	if err != nil {
		return err
	}
	bias = 0
	if out != y && w.bias != nil {
		bias = w.bias.ptr
	}
	return b.biasAct(out, y, bias, kind, alpha, slope, nslope)
}

// minFusedPixels is the fewest output pixels a bf16 or f32 convolution
// needs for cuDNN's fused epilogue: on the H200 its fixed algorithm runs
// small bf16 shapes (the ReAE encoder's 160x90 layers, one frame at a
// time) through float32 NCHW kernels with layout conversions (seen in a
// kernel profile). fp16 has no such limit: CDA-VSR's P step at 320x180
// (57,600 pixels) took 0.79-0.81 ms with the epilogue fused against
// 1.03-1.09 ms without, three rounds in one call.
const minFusedPixels = 1 << 16

// convCuDNN computes y = act(conv(x, w) + bias + res) through cuDNN, res
// optional: with a bias and ReLU on a large enough output, in cuDNN's
// fused epilogue; otherwise the bias and activation take one pass of
// their own, and res another two.
func (b *Backend) convCuDNN(x *Tensor, w *convWeights, p backend.ConvParams, act backend.Activation, res, y *Tensor) error {
	cw, in, out := w, x, y
	if w.padded != nil && !b.noChannelPad {
		cw = w.padded
		var err error
		if in, err = b.padChannels(x, cw.in); err != nil {
			return err
		}
		if in != x {
			defer in.Free()
		}
		if cw.out != w.out {
			var err error
			if out, err = b.alloc(backend.Shape{N: y.shape.N, H: y.shape.H, W: y.shape.W, C: cw.out}); err != nil {
				return err
			}
			defer out.Free()
		}
	}
	// cuDNN's epilogue: bias, residual and ReLU; or bias and a residual
	// without activation (a residual block's second convolution); in fp16
	// also the bias alone (a pass of 21 us saved per 640x360 frame of 64
	// channels; not measured for the other types).
	if out == y && b.conv.fuse && !b.noConvFusion && w.biasT != nil &&
		(act.Kind == backend.ActReLU || act.Kind == backend.ActNone && (res != nil || b.dtype == F16)) &&
		(b.dtype == F16 || y.shape.N*y.shape.H*y.shape.W >= minFusedPixels) {
		return b.conv.forward(in, cw, p, y, &epilogue{bias: w.biasT.ptr, z: res, relu: act.Kind == backend.ActReLU})
	}
	if err := b.conv.forward(in, cw, p, out, nil); err != nil {
		return err
	}
	post := act // the activation comes after res, when there is one
	if res != nil {
		post = backend.Activation{}
	}
	if out != y || w.bias != nil || post.Kind != backend.ActNone {
		kind, alpha, slope, nslope, err := b.actArgs(post)
		if err != nil {
			return err
		}
		var bias cu.DevicePtr
		if w.bias != nil {
			bias = w.bias.ptr
		}
		if err := b.biasAct(out, y, bias, kind, alpha, slope, nslope); err != nil {
			return err
		}
	}
	if res == nil {
		return nil
	}
	n := int64(y.shape.Elems())
	if err := b.launch("binary", true, n, y.ptr(), res.ptr(), y.ptr(), n, int32(backend.OpAdd)); err != nil {
		return err
	}
	if act.Kind == backend.ActNone {
		return nil
	}
	kind, alpha, slope, nslope, err := b.actArgs(act)
	if err != nil {
		return err
	}
	return b.biasAct(y, y, 0, kind, alpha, slope, nslope)
}

// padChannels returns x with zero channels up to c (x itself when it has
// c channels), for a filter padded for the tensor cores.
func (b *Backend) padChannels(x *Tensor, c int) (*Tensor, error) {
	s := x.shape
	if s.C == c {
		return x, nil
	}
	in, err := b.alloc(backend.Shape{N: s.N, H: s.H, W: s.W, C: c})
	if err != nil {
		return nil, err
	}
	px := int64(s.N * s.H * s.W)
	if err := b.launch(b.moves("pad_channels"), false, px*int64(c), x.ptr(), in.ptr(), px, int32(s.C), int32(c)); err != nil {
		in.Free()
		return nil, err
	}
	return in, nil
}

// biasAct computes y = act(x + bias) (in place when x == y) from the first
// y.C channels of each pixel of x, eight values per thread when the
// channel counts allow.
func (b *Backend) biasAct(x, y *Tensor, bias cu.DevicePtr, kind int32, alpha float32, slope cu.DevicePtr, nslope int32) error {
	n, c, cs := int64(y.shape.Elems()), y.shape.C, x.shape.C
	if c%8 == 0 && cs == c && b.dtype != F32 {
		return b.launch("bias_act8", true, n/8, x.ptr(), y.ptr(), bias, int32(c), n/8, kind, alpha, slope, nslope)
	}
	return b.launch("bias_act", true, n, x.ptr(), y.ptr(), bias, int32(c), int32(cs), n, kind, alpha, slope, nslope)
}

// minFusedWaves is the fewest tiles per multiprocessor for which the
// fused kernel is used: one CTA per multiprocessor loads the whole filter
// and then loops over its tiles, so a small problem (one 640x360 frame is
// 6.8 tiles per multiprocessor) is faster through cuDNN: 60 against 71 us
// per 64 -> 64 convolution in a kernel profile, CDA-VSR at 254-263
// against 241-243 frames/s (the compact model's batches of 8 frames are
// 55 tiles per multiprocessor).
const minFusedWaves = 8

// canFuse reports whether the fused tensor-core kernel computes this
// convolution: fp16, 3x3, padding 1, stride 1, no dilation, 16 to 64 input
// channels (a multiple of 16), 8 to 64 outputs (a multiple of 8), and no
// activation, PReLU, or ReLU and leaky ReLU (as PReLU with one slope) for
// 48 outputs or more; output ys of at least minFusedWaves tiles per
// multiprocessor.
func (b *Backend) canFuse(w *convWeights, p backend.ConvParams, act backend.Activation, ys backend.Shape) bool {
	return b.fused != nil && !b.NoFusedConv && b.dtype == F16 &&
		fusedTiles(ys.N, ys.H, ys.W) >= b.fusedMin && unitConv(p, 3, 1) &&
		w.in%16 == 0 && w.in <= 64 && w.out%8 == 0 && w.out <= 64 && fusedAct(act) &&
		// ReLU and leaky ReLU where the kernel computes no wasted
		// channels (below 48 outputs it computes 64 and drops some).
		(act.Kind == backend.ActNone || act.Kind == backend.ActPReLU || w.out >= 48)
}

// fusedAct reports whether the fused kernel's PReLU epilogue computes act.
func fusedAct(act backend.Activation) bool {
	switch act.Kind {
	case backend.ActNone, backend.ActPReLU, backend.ActReLU, backend.ActLeaky:
		return true
	}
	return false
}

// sharedSlope returns a device float32 holding v, made once per value: the
// one slope of ReLU (0) or a leaky ReLU, for the fused kernel's PReLU.
func (b *Backend) sharedSlope(v float32) (cu.DevicePtr, error) {
	if k, ok := b.slopes[v]; ok {
		return k.ptr, nil
	}
	k, err := b.upload32([]float32{v})
	if err != nil {
		return 0, err
	}
	b.slopes[v] = k
	return k.ptr, nil
}

// fusedTiles is the fused kernel's tiles of 2 rows x 128 pixels.
func fusedTiles(n, h, w int) int { return n * ((h + 1) / 2) * ((w + 127) / 128) }

// fusedConv runs conv + bias + PReLU in one persistent kernel: one CTA per
// multiprocessor, each looping over tiles of 2 rows x 128 pixels.
func (b *Backend) fusedConv(x *Tensor, w *convWeights, act backend.Activation, y *Tensor) error {
	s := x.shape
	bias, slope, nslope, err := b.fusedEpilogue(w, act)
	if err != nil {
		return err
	}
	tiles := fusedTiles(s.N, s.H, s.W)
	return b.fused.Launch(cu.LaunchConfig{
		Grid: cu.Dim3{X: uint32(min(tiles, b.sms))}, Block: cu.Dim3{X: fusedBlock},
		SharedMem: fusedSmem, Stream: b.compute,
	}, x.ptr(), w.w.ptr, bias, slope, nslope, y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(w.out))
}

// fusedEpilogue returns the fused kernels' bias (0: none) and PReLU slopes
// (0: no activation; ReLU and leaky ReLU as one shared slope) for w and act.
func (b *Backend) fusedEpilogue(w *convWeights, act backend.Activation) (bias, slope cu.DevicePtr, nslope int32, err error) {
	if w.bias != nil {
		bias = w.bias.ptr
	}
	switch act.Kind {
	case backend.ActPReLU:
		_, _, slope, nslope, err = b.actArgs(act)
	case backend.ActReLU, backend.ActLeaky:
		v := act.Alpha
		if act.Kind == backend.ActReLU {
			v = 0
		}
		slope, err = b.sharedSlope(v)
		nslope = 1
	}
	return bias, slope, nslope, err
}

// sliceSource is convslice.cu's dense-block build: tiles of 4 rows x 64 pixels, room
// for 96 filter rows, so that a 32-output convolution reads up to 192
// channels, and 4 compute warps of 64 pixels x 32 channels (on the H200,
// 64 -> 32 of a 192-channel buffer took 155 us for 4 frames of 640x360 with
// them, 191 us with 8 warps of 16 channels).
var sliceSource = &Source{Name: "convslice.cu", Code: sliceConvCode, Options: []string{"-DCF_TM=64", "-DCF_FROWS=96", "-DCF_NG=1"}}

// Launch shape of sliceSource's kernel.
const (
	sliceBlock = 192
	sliceSmem  = 212096
	sliceRows  = 96
)

// sliceTiles is the dense-block build's tiles of 4 rows x 64 pixels.
func sliceTiles(n, h, w int) int { return n * ((h + 3) / 4) * ((w + 63) / 64) }

// sliceKernel returns the dense-block build, compiling it on first use.
func (b *Backend) sliceKernel() (*cu.Function, error) {
	if b.slice != nil {
		return b.slice, nil
	}
	f, err := b.kernel(sliceSource, "conv3x3_bias_prelu_f16")
	if err == nil {
		err = f.SetAttribute(cu.FuncMaxDynamicSharedSizeBytes, sliceSmem)
	}
	if err != nil {
		return nil, err
	}
	b.slice = f
	return f, nil
}

// filterRows is how many filter rows the fused kernel holds for a
// convolution of in channels to out: a group of rows per 64 channels,
// each 16, 32 or 48 rows for that many outputs, else 64.
func filterRows(in, out int) int {
	rows := 64
	if out == 16 || out == 32 || out == 48 && in == 64 {
		rows = out
	}
	return (in + 63) / 64 * rows
}

// CanSliceConv reports whether the dense-block build of the fused kernel
// runs the convolution: fp16, 3x3, padding 1, stride 1, input channels a
// multiple of 16, the filter rows within the build's room (32 outputs from
// up to 192 channels), pixels of inC and outC channels 16-byte aligned.
func (b *Backend) CanSliceConv(wt backend.Weights, p backend.ConvParams, act backend.Activation, inC, outC int) bool {
	w, ok := wt.(*convWeights)
	if !ok || b.fused == nil || b.NoFusedConv || b.dtype != F16 || !unitConv(p, 3, 1) || !fusedAct(act) ||
		w.in%16 != 0 || w.out%8 != 0 || w.out > 64 || inC%8 != 0 || outC%8 != 0 || filterRows(w.in, w.out) > sliceRows {
		return false
	}
	_, err := b.sliceKernel()
	return err == nil
}

// SliceConv convolves channels [0, w.In()) of x into channels [at,
// at+w.Out()) of y in the dense-block build of the fused kernel, or, where
// CanSliceConv says no, through Channels, Conv2D and CopyChannels.
func (b *Backend) SliceConv(xt backend.Tensor, wt backend.Weights, p backend.ConvParams, act backend.Activation, yt backend.Tensor, at int) error {
	x, y, err := b.two(xt, yt)
	if err != nil {
		return err
	}
	w, ok := wt.(*convWeights)
	if !ok {
		return fmt.Errorf("cuda conv given %T weights", wt)
	}
	if err := check.SliceConv(x.shape, y.shape, p, w.in, w.out, w.kh, w.kw, at, x.ptr() == y.ptr()); err != nil {
		return err
	}
	if at%8 != 0 || !b.CanSliceConv(w, p, act, x.shape.C, y.shape.C) {
		return b.sliceConvCopies(x, w, p, act, y, at)
	}
	s := x.shape
	bias, slope, nslope, err := b.fusedEpilogue(w, act)
	if err != nil {
		return err
	}
	return b.slice.Launch(cu.LaunchConfig{
		Grid: cu.Dim3{X: uint32(min(sliceTiles(s.N, s.H, s.W), b.sms))}, Block: cu.Dim3{X: sliceBlock},
		SharedMem: sliceSmem, Stream: b.compute,
	}, x.ptr(), w.w.ptr, bias, slope, nslope, y.ptr().Add(at*b.esize()), int32(s.N), int32(s.H), int32(s.W),
		int32(w.in), int32(w.out), int32(s.C), int32(y.shape.C))
}

// sliceConvCopies is SliceConv through copies of the channels.
func (b *Backend) sliceConvCopies(x *Tensor, w *convWeights, p backend.ConvParams, act backend.Activation, y *Tensor, at int) error {
	in := backend.Tensor(x)
	if x.shape.C != w.in {
		part, err := b.Channels(x, 0, w.in)
		if err != nil {
			return err
		}
		defer part.Free()
		in = part
	}
	out, err := b.Conv2D(in, w, p, act)
	if err != nil {
		return err
	}
	defer out.Free()
	return b.CopyChannels(y, at, out)
}

// Activate applies an activation to a copy of x.
func (b *Backend) Activate(xt backend.Tensor, act backend.Activation) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	kind, alpha, slope, nslope, err := b.actArgs(act)
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(x.shape)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.biasAct(x, y, 0, kind, alpha, slope, nslope))
}

// PixelShuffle rearranges channels into r x r blocks.
func (b *Backend) PixelShuffle(xt backend.Tensor, r int, order backend.ShuffleOrder) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if r <= 0 || s.C%(r*r) != 0 {
		return nil, fmt.Errorf("pixel shuffle by %d: %d channels is not a multiple of %d", r, s.C, r*r)
	}
	oc := s.C / (r * r)
	y, err := b.alloc(backend.Shape{N: s.N, H: s.H * r, W: s.W * r, C: oc})
	if err != nil {
		return nil, err
	}
	if oc <= 4 && !b.scalarMoves {
		return b.finish(y, b.launch(b.moves("pixel_shuffle_px"), false, int64(y.shape.N*y.shape.H*y.shape.W), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(oc), int32(r), int32(order)))
	}
	return b.finish(y, b.launch("pixel_shuffle", true, int64(y.shape.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(oc), int32(r), int32(order)))
}

// two unwraps two operands.
func (b *Backend) two(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, err := b.tensor(at)
	if err != nil {
		return nil, nil, err
	}
	y, err := b.tensor(bt)
	return x, y, err
}

// anyTwo is two for ops that take float32 tensors too.
func (b *Backend) anyTwo(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, err := b.anyTensor(at)
	if err != nil {
		return nil, nil, err
	}
	y, err := b.anyTensor(bt)
	return x, y, err
}

// pair unwraps the two operands of an elementwise op, of one shape and
// one type (the storage type, or float32 beside it).
func (b *Backend) pair(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, y, err := b.anyTwo(at, bt)
	if err == nil && x.shape != y.shape {
		err = fmt.Errorf("elementwise op on shapes %v and %v", x.shape, y.shape)
	}
	if err == nil {
		err = sameType("elementwise op", x, y)
	}
	return x, y, err
}

// Binary combines two tensors elementwise.
func (b *Backend) Binary(op backend.BinaryOp, at, bt backend.Tensor) (backend.Tensor, error) {
	x, z, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	y, err := b.allocAs(x.shape, x.dt())
	if err != nil {
		return nil, err
	}
	n := int64(x.shape.Elems())
	return b.finish(y, b.launchAs("binary", x.dt(), n, x.ptr(), z.ptr(), y.ptr(), n, int32(op)))
}

// AddScaled computes ca*a + cb*b elementwise.
func (b *Backend) AddScaled(at backend.Tensor, ca float32, bt backend.Tensor, cb float32) (backend.Tensor, error) {
	x, z, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	y, err := b.allocAs(x.shape, x.dt())
	if err != nil {
		return nil, err
	}
	n := int64(x.shape.Elems())
	return b.finish(y, b.launchAs("axpby", x.dt(), n, x.ptr(), z.ptr(), y.ptr(), n, ca, cb))
}

// CopyChannels copies src into channels [at, at+src.C) of dst.
// The two may be of different types (backend.Wide): the values are
// converted.
func (b *Backend) CopyChannels(dstt backend.Tensor, at int, srct backend.Tensor) error {
	dst, src, err := b.anyTwo(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.Channels(dst.shape, at, src.shape); err != nil {
		return err
	}
	return b.copyChannels(src, dst, at)
}

// Channels returns channels [at, at+n) of x.
func (b *Backend) Channels(xt backend.Tensor, at, n int) (backend.Tensor, error) {
	x, err := b.anyTensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	s.C = n
	if err := check.Channels(x.shape, at, s); err != nil {
		return nil, err
	}
	y, err := b.allocAs(s, x.dt())
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.copyBlock(x, y, s.N*s.H*s.W, n, x.shape.C, at, n, 0))
}

// Band returns rows [y, y+h) of every frame of x, zeros outside it.
func (b *Backend) Band(xt backend.Tensor, y0, h int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	s.H = h
	if err := check.Band(x.shape, y0, s, true); err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	row := s.W * s.C
	if y0 < 0 || y0+h > x.shape.H { // zeros outside the frame
		return b.finish(y, b.launch(b.moves("band_rows"), false, int64(y.shape.Elems()), x.ptr(), y.ptr(),
			int64(s.N), int32(x.shape.H), int32(h), int64(row), int32(y0)))
	}
	return b.finish(y, b.copyBlock(x, y, s.N, h*row, x.shape.H*row, y0*row, h*row, 0))
}

// CopyBand copies src into rows [y, y+src.H) of every frame of dst.
func (b *Backend) CopyBand(dstt backend.Tensor, y0 int, srct backend.Tensor) error {
	dst, src, err := b.two(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.Band(dst.shape, y0, src.shape, false); err != nil {
		return err
	}
	s := src.shape
	row := s.W * s.C
	return b.copyBlock(src, dst, s.N, s.H*row, s.H*row, 0, dst.shape.H*row, y0*row)
}

// copyBlock copies rows blocks of n values, block r from src's value
// r*ss+so to dst's value r*ds+d0 (kernels.cu's copy_block), 16 bytes at a
// time where every size, offset and address allows.
func (b *Backend) copyBlock(src, dst *Tensor, rows, n, ss, so, ds, d0 int) error {
	sizes := []int{n, ss, so, ds, d0}
	es := src.dt().size()
	name, l := "copy_block8", 16/es
	vec := !b.scalarMoves && src.ptr()%16 == 0 && dst.ptr()%16 == 0
	for _, v := range sizes {
		vec = vec && v%l == 0
	}
	if !vec {
		name, l = movesOf("copy_block", es), 1
	}
	args := []any{src.ptr(), dst.ptr(), int64(rows)}
	for _, v := range sizes {
		args = append(args, int64(v/l))
	}
	return b.launch(name, false, int64(rows)*int64(n/l), args...)
}

// taps is a resize axis uploaded to the device.
type taps struct {
	n   int
	idx *block
	wt  *block
	b   *Backend
}

func (t *taps) free() {
	t.b.pool.put(t.idx)
	t.b.pool.put(t.wt)
}

// axis returns the device copy of MakeTaps' result, cached by arguments.
func (b *Backend) axis(mode backend.ResizeMode, out, dstOff, dstFull, srcLen, srcOff, srcFull int) (*taps, error) {
	key := fmt.Sprint(mode, out, dstOff, dstFull, srcLen, srcOff, srcFull)
	if t, ok := b.tapCache[key]; ok {
		return t, nil
	}
	a := check.MakeTaps(mode, out, dstOff, dstFull, srcLen, srcOff, srcFull)
	idx := make([]int32, len(a.Idx))
	for i, v := range a.Idx {
		idx[i] = int32(v)
	}
	t := &taps{n: a.N, b: b}
	var err error
	if t.idx, err = b.pool.get(int64(len(idx)) * 4); err != nil {
		return nil, err
	}
	if t.wt, err = b.upload32(a.Wt); err != nil {
		b.pool.put(t.idx)
		return nil, err
	}
	if err := b.compute.CopyHtoD(t.idx.ptr, cu.AsBytes(idx)); err != nil {
		t.free()
		return nil, err
	}
	if err := b.compute.Synchronize(); err != nil {
		t.free()
		return nil, err
	}
	if len(b.tapCache) > 256 {
		for k, old := range b.tapCache {
			old.free()
			delete(b.tapCache, k)
		}
	}
	b.tapCache[key] = t
	return t, nil
}

// Resize resamples x with the taps every backend shares.
func (b *Backend) Resize(xt backend.Tensor, mode backend.ResizeMode, oh, ow int, src, dst backend.Tile) (backend.Tensor, error) {
	x, err := b.anyTensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	src, dst, err = check.ResizeTiles(s, mode, oh, ow, src, dst)
	if err != nil {
		return nil, err
	}
	ay, err := b.axis(mode, oh, dst.Y, dst.FullH, s.H, src.Y, src.FullH)
	if err != nil {
		return nil, err
	}
	ax, err := b.axis(mode, ow, dst.X, dst.FullW, s.W, src.X, src.FullW)
	if err != nil {
		return nil, err
	}
	y, err := b.allocAs(backend.Shape{N: s.N, H: oh, W: ow, C: s.C}, x.dt())
	if err != nil {
		return nil, err
	}
	if l := b.lanes(); mode == backend.Nearest && !x.wide && b.vec8(s.C, max(s.Elems(), y.shape.Elems()), x.ptr(), y.ptr()) {
		return b.finish(y, b.launch("nearest8", false, int64(y.shape.Elems()/l), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C/l), int32(oh), int32(ow),
			ay.idx.ptr, ax.idx.ptr))
	}
	name, n := "resize", int64(y.shape.Elems())
	if s.C <= 4 && !b.scalarMoves {
		name, n = "resize_px", int64(y.shape.N*oh*ow)
	}
	return b.finish(y, b.launchAs(name, x.dt(), n, x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(oh), int32(ow),
		ay.idx.ptr, ay.wt.ptr, int32(ay.n), ax.idx.ptr, ax.wt.ptr, int32(ax.n)))
}

// lazyShuffle is PixelShuffle(x, r) + NearestUpsample(base, r), kept
// uncomputed until its consumer is known.
type lazyShuffle struct {
	x, base *Tensor
	r       int
	order   backend.ShuffleOrder
}

// ShuffleAddNearest returns PixelShuffle(x, r) + Resize(base, Nearest, x r),
// the tail of SRVGGNetCompact, as one fused kernel. The result is computed
// when first used; when it goes straight to ToRGB8 or a Slot's Put, the
// same kernel writes the 8-bit frames directly. The inputs stay owned by
// the caller; the result holds its own references to them.
func (b *Backend) ShuffleAddNearest(xt, baset backend.Tensor, r int, order backend.ShuffleOrder) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	base, err := b.tensor(baset)
	if err != nil {
		return nil, err
	}
	xs, bs := x.shape, base.shape
	os, err := check.ShuffleAddShape(xs, bs, r)
	if err != nil {
		return nil, err
	}
	if bs.C != 3 {
		return nil, fmt.Errorf("shuffle-add: the GPU kernel handles RGB, not %d channels", bs.C)
	}
	// Hold our own references, so the caller may free its tensors.
	lx, lb := b.share(x), b.share(base)
	return &Tensor{shape: os, b: b, lazy: &lazyShuffle{x: lx, base: lb, r: r, order: order}}, nil
}

// shuffleAddInto runs the fused kernel writing at dst the storage type
// (storage set) or frames of format f.
func (b *Backend) shuffleAddInto(l *lazyShuffle, dst cu.DevicePtr, storage bool, f backend.PixelFormat) error {
	s := l.x.shape
	H, W := s.H*l.r, s.W*l.r
	n := int64(s.N) * int64(H) * int64(W)
	mode, sub, wide, conv := frameArgs(f)
	if storage {
		mode = 0
	} else if mode == 2 {
		n /= int64(sub * sub)
	}
	return b.launch("shuffle_add_nearest", true, n, l.x.ptr(), l.base.ptr(), dst, int32(s.N), int32(s.H), int32(s.W), int32(l.r), int32(l.order), mode, sub, wide, conv)
}

// frameArgs is the output mode of shuffle_add_nearest for frames of f (1
// RGB24, 3 RGB48, 2 YUV) and to_yuv's arguments: chroma subsampling, 16-bit
// samples, the conversion.
func frameArgs(f backend.PixelFormat) (mode, sub, wide int32, conv cu.Raw) {
	mode, sub = 1, 1
	if f.Wide() {
		mode, wide = 3, 1
	}
	if f.Layout != backend.PackedRGB {
		mode = 2
		if f.Layout == backend.YUV420 {
			sub = 2
		}
	}
	return mode, sub, wide, cu.Raw(f.Conversion().Raw())
}

func (b *Backend) materialize(t *Tensor) error {
	blk, err := b.pool.get(int64(t.shape.Elems() * b.esize()))
	if err != nil {
		return err
	}
	if err := b.shuffleAddInto(t.lazy, blk.ptr, true, backend.RGB24); err != nil {
		b.pool.put(blk)
		return err
	}
	t.lazy.x.Free()
	t.lazy.base.Free()
	t.lazy, t.buf = nil, blk
	return nil
}

// FromRGB8 uploads packed RGB24 frames and scales them to [0,1].
func (b *Backend) FromRGB8(rgb []byte, n, h, w int) (backend.Tensor, error) {
	return b.fromFrames(rgb, backend.RGB24, n, h, w)
}

// FromRGB16 uploads packed RGB48 frames and scales them to [0,1].
func (b *Backend) FromRGB16(rgb []byte, n, h, w int) (backend.Tensor, error) {
	return b.fromFrames(rgb, backend.RGB48, n, h, w)
}

func (b *Backend) fromFrames(data []byte, f backend.PixelFormat, n, h, w int) (backend.Tensor, error) {
	s := backend.Shape{N: n, H: h, W: w, C: 3}
	if len(data) != n*f.FrameBytes(w, h) {
		return nil, fmt.Errorf("%s frames %dx%dx%d: got %d bytes", f.Name(), n, w, h, len(data))
	}
	tmp, err := b.pool.get(int64(len(data)))
	if err != nil {
		return nil, err
	}
	defer b.pool.put(tmp)
	if err := b.compute.CopyHtoD(tmp.ptr, data); err != nil {
		return nil, err
	}
	return b.fromFramesDevice(tmp.ptr, f, s, b.dtype)
}

// fromFramesDevice converts frames of input format f at src to a tensor
// of type dt, on the compute stream.
func (b *Backend) fromFramesDevice(src cu.DevicePtr, f backend.PixelFormat, s backend.Shape, dt DType) (*Tensor, error) {
	if err := f.CheckInput(); err != nil {
		return nil, err
	}
	t, err := b.allocAs(s, dt)
	if err != nil {
		return nil, err
	}
	n := int64(s.Elems())
	switch f {
	case backend.RGB24:
		err = b.launchAs("from_rgb8", dt, n, src, t.ptr(), n)
	case backend.RGB48:
		err = b.launchAs("from_rgb16", dt, n, src, t.ptr(), n)
	default:
		sx, sy := f.Subsampling()
		ox, oy := f.Siting.Offsets()
		err = b.launchAs("from_yuv", dt, int64(s.N*s.H*s.W), src, t.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(sx), int32(sy), ox, oy, cu.Raw(f.Inverse().Raw()))
	}
	if err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// toFrames converts t to frames of format f at dst on the compute stream
// and returns the byte count.
func (b *Backend) toFrames(tt backend.Tensor, f backend.PixelFormat, dst cu.DevicePtr) (int, error) {
	ct, ok := tt.(*Tensor)
	if !ok {
		return 0, fmt.Errorf("cuda backend given a %T tensor", tt)
	}
	s := ct.shape
	if s.C != 3 {
		return 0, fmt.Errorf("frames need 3 channels, tensor is %v", s)
	}
	size := s.N * f.FrameBytes(s.W, s.H)
	if err := f.CheckSize(s.W, s.H); err != nil {
		return 0, err
	}
	if ct.lazy != nil && (f.Layout != backend.YUV420 || ct.lazy.r%2 == 0) {
		return size, b.shuffleAddInto(ct.lazy, dst, false, f)
	}
	t, err := b.anyTensor(ct)
	if err != nil {
		return 0, err
	}
	mode, sub, wide, conv := frameArgs(f)
	switch mode {
	case 2:
		return size, b.launchAs("to_yuv", t.dt(), int64(s.N*(s.H/int(sub))*(s.W/int(sub))), t.ptr(), dst, int32(s.N), int32(s.H), int32(s.W), sub, wide, conv)
	case 3:
		n := int64(s.Elems())
		return size, b.launchAs("to_rgb16", t.dt(), n, t.ptr(), dst, n)
	}
	n := int64(s.Elems())
	return size, b.launchAs("to_rgb8", t.dt(), n, t.ptr(), dst, n)
}

// ToRGB8 converts to RGB24 bytes on the device and copies them to dst.
func (b *Backend) ToRGB8(t backend.Tensor, dst []byte) error {
	return b.download(t, backend.RGB24, dst)
}

// ToRGB16 converts to RGB48 words on the device and copies them to dst.
func (b *Backend) ToRGB16(t backend.Tensor, dst []byte) error {
	return b.download(t, backend.RGB48, dst)
}

// download converts t to frames of format f on the device and copies them
// to dst.
func (b *Backend) download(t backend.Tensor, f backend.PixelFormat, dst []byte) error {
	s := t.Shape()
	if s.C != 3 || len(dst) != s.N*f.FrameBytes(s.W, s.H) {
		return fmt.Errorf("to %s: tensor %v, buffer of %d bytes", f.Name(), s, len(dst))
	}
	tmp, err := b.pool.get(int64(len(dst)))
	if err != nil {
		return err
	}
	defer b.pool.put(tmp)
	if _, err := b.toFrames(t, f, tmp.ptr); err != nil {
		return err
	}
	if err := b.compute.CopyDtoH(dst, tmp.ptr); err != nil {
		return err
	}
	return b.compute.Synchronize()
}

package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

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
	case res == nil && b.canFuseSmall(w, p, act):
		return b.finish(y, b.fusedConvSmall(x, w, act, y))
	case res == nil && b.canGemm(p):
		return b.finish(y, b.conv1x1(x, w, act, y))
	case res == nil && b.canTaps(w, p):
		return b.finish(y, b.convTaps(x, w, act, y))
	}
	return b.finish(y, b.convCuDNN(x, w, p, act, res, y))
}

// canGemm reports whether a convolution is a plain matrix product that
// conv1x1 computes: 1x1, stride 1, no padding or dilation, fp16 storage.
// bf16 and f32 keep cuDNN's choices. (Why: docs/BENCHMARKS.md, "Notes
// moved from code comments".)
func (b *Backend) canGemm(p backend.ConvParams) bool {
	return b.dtype == F16 && unitConv(p, 1, 0)
}

// canTaps reports whether convTaps computes a convolution: 3x3, padding
// 1, stride 1, fp16 storage (as canGemm), channel counts multiples of 8
// (16-byte rows for the GEMM) and at least 9 inputs per output (the GEMM's
// output, 9 values per output channel, is then no larger than its input).
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

package cuda

import (
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/nvidia/cublaslt"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

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

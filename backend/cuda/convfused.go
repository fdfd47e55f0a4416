package cuda

import (
	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// minFusedWaves is the fewest tiles per multiprocessor for which the
// fused kernel is used: one CTA per multiprocessor loads the whole filter
// and then loops over its tiles, so a small problem (one 640x360 frame is
// 6.8 tiles per multiprocessor; the compact model's batches of 8 frames
// are 55) runs through cuDNN instead. (Measurements: docs/BENCHMARKS.md,
// "Notes moved from code comments".)
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
		w.in%16 == 0 && w.in <= 64 && w.out%8 == 0 && w.out <= 64 && fusedActFor(act, w.out)
}

// canFuseSmall reports whether the fused kernel computes this
// convolution of fewer than 8 input channels (a network's first, on RGB)
// through its filter padded to 16 inputs (w.small; the input padded
// likewise), at any size: such a convolution is cheap for the fused
// kernel however few its tiles, where cuDNN's timed choice for one
// 640x360 frame was a generic kernel at a few TFLOP/s
// (docs/BENCHMARKS.md).
func (b *Backend) canFuseSmall(w *convWeights, p backend.ConvParams, act backend.Activation) bool {
	return b.fused != nil && !b.NoFusedConv && w.small != nil && unitConv(p, 3, 1) && fusedActFor(act, w.out)
}

// fusedConvSmall is fusedConv of a convolution canFuseSmall takes: x
// padded to 16 channels, w.small, w's bias.
func (b *Backend) fusedConvSmall(x *Tensor, w *convWeights, act backend.Activation, y *Tensor) error {
	xp, err := b.padChannels(x, w.small.in)
	if err != nil {
		return err
	}
	defer xp.Free()
	sw := *w.small
	sw.bias = w.bias
	return b.fusedConv(xp, &sw, act, y)
}

// fusedActFor reports whether the fused kernel computes act for a
// convolution of out outputs: none or PReLU, or ReLU and leaky ReLU where
// the kernel computes no wasted channels (below 48 outputs it computes 64
// and drops some).
func fusedActFor(act backend.Activation, out int) bool {
	return fusedAct(act) && (act.Kind == backend.ActNone || act.Kind == backend.ActPReLU || out >= 48)
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

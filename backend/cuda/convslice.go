package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// sliceSource is convslice.cu's dense-block build: tiles of 4 rows x 64 pixels, room
// for 96 filter rows, so that a 32-output convolution reads up to 192
// channels, and 4 compute warps of 64 pixels x 32 channels (the faster of
// the two builds measured: docs/BENCHMARKS.md, "Notes moved from code
// comments").
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

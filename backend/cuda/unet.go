package cuda

import (
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

var _ backend.UNet = (*Backend)(nil)

// Pad pads or crops each side of every frame (backend.UNet).
func (b *Backend) Pad(xt backend.Tensor, top, bottom, left, right int, mode backend.PadMode) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	os, err := check.PadShape(s, top, bottom, left, right, mode)
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(os)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch(b.moves("pad"), false, int64(os.Elems()), x.ptr(), y.ptr(),
		int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(top), int32(bottom), int32(left), int32(right), int32(mode)))
}

// ChannelMean returns each frame's channel means, summed in float32
// (backend.UNet).
func (b *Backend) ChannelMean(xt backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	y, err := b.alloc(backend.Shape{N: s.N, H: 1, W: 1, C: s.C})
	if err != nil {
		return nil, err
	}
	f, err := b.fn("channel_mean", true)
	if err != nil {
		return b.finish(y, err)
	}
	return b.finish(y, f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32((s.C + 31) / 32), Y: uint32(s.N)}, Block: cu.Dim3{X: 32, Y: 8}, Stream: b.compute},
		x.ptr(), y.ptr(), int64(s.H*s.W), int32(s.C)))
}

// ScaleChannels multiplies each channel of each frame by its factor
// (backend.UNet).
func (b *Backend) ScaleChannels(xt, kt backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	k, err := b.tensor(kt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if err := check.ScaleChannelsShapes(s, k.shape); err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	n := int64(s.Elems())
	return b.finish(y, b.launch("scale_channels", true, n, x.ptr(), k.ptr(), int64(s.H*s.W), int32(s.C), n))
}

package cuda

import (
	"fmt"

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
	return b.finish(y, b.launch("scale_channels", true, n, x.ptr(), k.ptr(), y.ptr(), int64(s.H*s.W), int32(s.C), n))
}

var _ backend.Norm = (*Backend)(nil)

// GroupNorm normalises each frame's channel groups over its pixels and
// adds res (backend.Norm): one pass sums each group in double, a second
// normalises. Where the channels and the groups' channels are multiples
// of 8, both passes move 8 channels a thread (groupNorm8), each group's
// mean and rstd computed once between them.
func (b *Backend) GroupNorm(xt backend.Tensor, groups int, scale, shift backend.Tensor, eps float32, rt backend.Tensor) (backend.Tensor, error) {
	x, a, c, err := b.normArgs(xt, groups, scale, shift)
	if err != nil {
		return nil, err
	}
	var res *Tensor
	if rt != nil {
		if res, err = b.tensor(rt); err != nil {
			return nil, err
		}
		if err := check.NormAdd(x.shape, res.shape); err != nil {
			return nil, err
		}
	}
	s := x.shape
	if nv := s.C / 8; s.C%8 == 0 && (s.C/groups)%8 == 0 && groups <= 64 && nv <= 256 && int64(s.H*s.W)*int64(nv) < 1<<31 {
		return b.groupNorm8(x, groups, a, c, eps, res)
	}
	y, err := b.groupNorm(x, groups, a, c, eps)
	if err != nil || res == nil {
		return y, err
	}
	defer y.Free()
	return b.Binary(backend.OpAdd, y, res)
}

// groupNorm8 is GroupNorm 8 channels a thread: group_stats8,
// group_finalize and group_apply8 (kernels.cu).
func (b *Backend) groupNorm8(x *Tensor, groups int, scale, shift cu.DevicePtr, eps float32, res *Tensor) (backend.Tensor, error) {
	s := x.shape
	px, nv, cg := int32(s.H*s.W), s.C/8, int32(s.C/groups)
	tmp, err := b.pool.get(int64(16*s.N*groups + 8*s.N*s.C))
	if err != nil {
		return nil, err
	}
	defer b.pool.put(tmp)
	stats, ma := tmp.ptr, tmp.ptr+cu.DevicePtr(16*s.N*groups)
	if err := b.compute.Memset8(stats, 0, 16*s.N*groups); err != nil {
		return nil, err
	}
	f, err := b.fn("group_stats8", true)
	if err != nil {
		return nil, err
	}
	ppb := max(256/nv, 1)
	chunks := uint32(max(min((int(px)+ppb-1)/ppb, b.sms*8/s.N), 1))
	if err := f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: chunks, Y: uint32(s.N)}, Block: cu.Dim3{X: uint32(nv * ppb)}, Stream: b.compute},
		x.ptr(), stats, px, int32(s.C), cg); err != nil {
		return nil, err
	}
	if err := b.launch("group_finalize", false, int64(s.N*s.C), stats, scale, ma, int32(s.N), int32(s.C), cg, float64(px)*float64(cg), eps); err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	var rp cu.DevicePtr
	if res != nil {
		rp = res.ptr()
	}
	if f, err = b.fn("group_apply8", true); err != nil {
		y.Free()
		return nil, err
	}
	chunks = uint32(max(min((int(px)*nv+255)/256, b.sms*16/s.N), 1))
	return b.finish(y, f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: chunks, Y: uint32(s.N)}, Block: cu.Dim3{X: 256}, Stream: b.compute},
		x.ptr(), ma, shift, rp, y.ptr(), px, int32(s.C)))
}

// groupNorm is GroupNorm one value a thread, without a residual.
func (b *Backend) groupNorm(x *Tensor, groups int, a, c cu.DevicePtr, eps float32) (backend.Tensor, error) {
	s := x.shape
	px, cg := int64(s.H*s.W), int32(s.C/groups)
	stats, err := b.pool.get(int64(16 * s.N * groups))
	if err != nil {
		return nil, err
	}
	defer b.pool.put(stats)
	if err := b.compute.Memset8(stats.ptr, 0, 16*s.N*groups); err != nil {
		return nil, err
	}
	f, err := b.fn("group_stats", true)
	if err != nil {
		return nil, err
	}
	chunks := uint32(min((px*int64(cg)+255)/256, int64(max(b.sms*4/(s.N*groups), 1))))
	if err := f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: chunks, Y: uint32(s.N * groups)}, Block: cu.Dim3{X: 256}, Stream: b.compute},
		x.ptr(), stats.ptr, px, int32(s.C), cg); err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	n := int64(s.Elems())
	return b.finish(y, b.launch("group_norm", true, n, x.ptr(), stats.ptr, a, c, y.ptr(), px, int32(s.C), cg, eps, n))
}

// ChannelNorm normalises each pixel's channels (backend.Norm).
func (b *Backend) ChannelNorm(xt backend.Tensor, scale, shift backend.Tensor, eps float32) (backend.Tensor, error) {
	x, a, c, err := b.normArgs(xt, 1, scale, shift)
	if err != nil {
		return nil, err
	}
	s := x.shape
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	px := int64(s.N * s.H * s.W)
	return b.finish(y, b.launch("channel_norm", true, px, x.ptr(), a, c, y.ptr(), int32(s.C), eps, px))
}

// normArgs checks GroupNorm's and ChannelNorm's arguments and returns the
// scale and shift's float32 copies.
func (b *Backend) normArgs(xt backend.Tensor, groups int, scale, shift backend.Tensor) (x *Tensor, a, c cu.DevicePtr, err error) {
	if x, err = b.tensor(xt); err != nil {
		return
	}
	st, ok1 := scale.(*Tensor)
	ht, ok2 := shift.(*Tensor)
	if !ok1 || !ok2 || st.f32 == nil || ht.f32 == nil {
		err = fmt.Errorf("norm: the scale and shift must come from Upload")
		return
	}
	if err = check.Norm(x.shape, groups, st.shape, ht.shape); err != nil {
		return
	}
	return x, st.f32.ptr, ht.f32.ptr, nil
}

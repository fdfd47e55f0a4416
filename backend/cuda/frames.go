package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// PixelUnshuffle moves r x r pixel blocks into channels (PyTorch order).
func (b *Backend) PixelUnshuffle(xt backend.Tensor, r int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if r <= 0 || s.H%r != 0 || s.W%r != 0 {
		return nil, fmt.Errorf("pixel unshuffle by %d: %dx%d is not a multiple", r, s.W, s.H)
	}
	y, err := b.alloc(backend.Shape{N: s.N, H: s.H / r, W: s.W / r, C: s.C * r * r})
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("pixel_unshuffle", false, int64(y.shape.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(r)))
}

// finish frees y when err is set, so every op returns cleanly.
func (b *Backend) finish(y *Tensor, err error) (backend.Tensor, error) {
	if err != nil {
		y.Free()
		return nil, err
	}
	return y, nil
}

// CropPad returns the top-left h x w of x, zero-filled beyond it.
func (b *Backend) CropPad(xt backend.Tensor, h, w int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if h <= 0 || w <= 0 {
		return nil, fmt.Errorf("crop/pad to %dx%d", w, h)
	}
	y, err := b.alloc(backend.Shape{N: s.N, H: h, W: w, C: s.C})
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("crop_pad", false, int64(y.shape.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(h), int32(w)))
}

// Frames copies frames [start, start+n).
func (b *Backend) Frames(xt backend.Tensor, start, n int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if start < 0 || n <= 0 || start+n > s.N {
		return nil, fmt.Errorf("frames [%d, %d) of a %d-frame tensor", start, start+n, s.N)
	}
	fs := s.H * s.W * s.C * 2
	y, err := b.alloc(backend.Shape{N: n, H: s.H, W: s.W, C: s.C})
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.compute.CopyDtoD(y.ptr(), x.ptr().Add(start*fs), n*fs))
}

// ConcatFrames stacks tensors along time.
func (b *Backend) ConcatFrames(ts ...backend.Tensor) (backend.Tensor, error) {
	if len(ts) == 0 {
		return nil, fmt.Errorf("concat of no tensors")
	}
	var parts []*Tensor
	n := 0
	for _, t := range ts {
		x, err := b.tensor(t)
		if err != nil {
			return nil, err
		}
		if p := x.shape; len(parts) > 0 && (p.H != parts[0].shape.H || p.W != parts[0].shape.W || p.C != parts[0].shape.C) {
			return nil, fmt.Errorf("concat of frames %v and %v", parts[0].shape, p)
		}
		parts = append(parts, x)
		n += x.shape.N
	}
	s := parts[0].shape
	y, err := b.alloc(backend.Shape{N: n, H: s.H, W: s.W, C: s.C})
	if err != nil {
		return nil, err
	}
	off := 0
	for _, p := range parts {
		size := p.shape.Elems() * 2
		if err := b.compute.CopyDtoD(y.ptr().Add(off), p.ptr(), size); err != nil {
			y.Free()
			return nil, err
		}
		off += size
	}
	return y, nil
}

// ConcatPrev pairs each frame with the one before it along channels.
func (b *Backend) ConcatPrev(xt, prevt backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	var prev cu.DevicePtr
	if prevt != nil {
		p, err := b.tensor(prevt)
		if err != nil {
			return nil, err
		}
		if p.shape != (backend.Shape{N: 1, H: s.H, W: s.W, C: s.C}) {
			return nil, fmt.Errorf("previous frame %v does not fit frames %v", p.shape, s)
		}
		prev = p.ptr()
	}
	y, err := b.alloc(backend.Shape{N: s.N, H: s.H, W: s.W, C: 2 * s.C})
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("concat_prev", false, int64(y.shape.Elems()), x.ptr(), prev, y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C)))
}

// FoldFrames folds s consecutive frames into channels.
func (b *Backend) FoldFrames(xt backend.Tensor, st int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if st <= 0 || s.N%st != 0 {
		return nil, fmt.Errorf("fold %d frames by %d", s.N, st)
	}
	y, err := b.alloc(backend.Shape{N: s.N / st, H: s.H, W: s.W, C: s.C * st})
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("fold_frames", false, int64(s.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(st)))
}

// UnfoldFrames splits channel groups back into frames.
func (b *Backend) UnfoldFrames(xt backend.Tensor, st int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if st <= 0 || s.C%st != 0 {
		return nil, fmt.Errorf("unfold %d channels by %d", s.C, st)
	}
	c := s.C / st
	y, err := b.alloc(backend.Shape{N: s.N * st, H: s.H, W: s.W, C: c})
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("unfold_frames", false, int64(s.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(c), int32(st)))
}

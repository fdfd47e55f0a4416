package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// PixelUnshuffle moves r x r pixel blocks into channels (PyTorch order).
func (b *Backend) PixelUnshuffle(xt backend.Tensor, r int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	os, err := check.UnshuffleShape(s, r)
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(os)
	if err != nil {
		return nil, err
	}
	if os.C <= 64 && !b.scalarMoves {
		return b.finish(y, b.launch(b.moves("pixel_unshuffle_px"), false, int64(os.N*os.H*os.W), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(r)))
	}
	return b.finish(y, b.launch(b.moves("pixel_unshuffle"), false, int64(y.shape.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(r)))
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
	os, err := check.CropPadShape(s, h, w)
	if err != nil {
		return nil, err
	}
	if os == s {
		return b.share(x), nil
	}
	y, err := b.alloc(os)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch(b.moves("crop_pad"), false, int64(y.shape.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(h), int32(w)))
}

// Frames copies frames [start, start+n).
func (b *Backend) Frames(xt backend.Tensor, start, n int) (backend.Tensor, error) {
	x, err := b.anyTensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	os, err := check.FramesShape(s, start, n)
	if err != nil {
		return nil, err
	}
	if os == s {
		return b.share(x), nil
	}
	fs := s.H * s.W * s.C * x.dt().size()
	y, err := b.allocAs(os, x.dt())
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.compute.CopyDtoD(y.ptr(), x.ptr().Add(start*fs), n*fs))
}

// Empty returns an uninitialised tensor.
func (b *Backend) Empty(s backend.Shape) (backend.Tensor, error) {
	if s.Elems() <= 0 {
		return nil, fmt.Errorf("empty tensor of shape %v", s)
	}
	return b.alloc(s)
}

// CopyFrames copies src into dst's frames from at on, in stream order.
func (b *Backend) CopyFrames(dstt backend.Tensor, at int, srct backend.Tensor) error {
	dst, src, err := b.anyTwo(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.CopyFrames(dst.shape, at, src.shape); err != nil {
		return err
	}
	if err := sameType("copy frames", dst, src); err != nil {
		return err
	}
	es := dst.dt().size()
	fs := dst.shape.H * dst.shape.W * dst.shape.C * es
	return b.compute.CopyDtoD(dst.ptr().Add(at*fs), src.ptr(), src.shape.Elems()*es)
}

// ConcatFrames stacks tensors along time.
func (b *Backend) ConcatFrames(ts ...backend.Tensor) (backend.Tensor, error) {
	parts := make([]*Tensor, len(ts))
	shapes := make([]backend.Shape, len(ts))
	for i, t := range ts {
		x, err := b.tensor(t)
		if err != nil {
			return nil, err
		}
		parts[i], shapes[i] = x, x.shape
	}
	os, err := check.ConcatShape(shapes)
	if err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		return b.share(parts[0]), nil
	}
	y, err := b.alloc(os)
	if err != nil {
		return nil, err
	}
	off := 0
	for _, p := range parts {
		size := p.shape.Elems() * b.esize()
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
	var ps *backend.Shape
	if prevt != nil {
		p, err := b.tensor(prevt)
		if err != nil {
			return nil, err
		}
		prev, ps = p.ptr(), &p.shape
	}
	os, err := check.ConcatPrevShape(s, ps)
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(os)
	if err != nil {
		return nil, err
	}
	if l := b.lanes(); b.vec8(s.C, y.shape.Elems(), x.ptr(), prev, y.ptr()) {
		return b.finish(y, b.launch("concat_prev8", false, int64(y.shape.Elems()/l), x.ptr(), prev, y.ptr(), int32(s.N), int32(s.H*s.W), int32(s.C/l)))
	}
	return b.finish(y, b.launch(b.moves("concat_prev"), false, int64(y.shape.Elems()), x.ptr(), prev, y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C)))
}

// FoldFrames folds s consecutive frames into channels.
func (b *Backend) FoldFrames(xt backend.Tensor, st int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	os, err := check.FoldShape(s, st)
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(os)
	if err != nil {
		return nil, err
	}
	if l := b.lanes(); b.vec8(s.C, s.Elems(), x.ptr(), y.ptr()) {
		return b.finish(y, b.launch("fold_frames8", false, int64(s.Elems()/l), x.ptr(), y.ptr(), int32(s.N), int32(s.H*s.W), int32(s.C/l), int32(st)))
	}
	return b.finish(y, b.launch(b.moves("fold_frames"), false, int64(s.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(st)))
}

// UnfoldFrames splits channel groups back into frames.
func (b *Backend) UnfoldFrames(xt backend.Tensor, st int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	os, err := check.UnfoldShape(s, st)
	if err != nil {
		return nil, err
	}
	c := os.C
	y, err := b.alloc(os)
	if err != nil {
		return nil, err
	}
	if l := b.lanes(); b.vec8(c, s.Elems(), x.ptr(), y.ptr()) {
		return b.finish(y, b.launch("unfold_frames8", false, int64(s.Elems()/l), x.ptr(), y.ptr(), int32(os.N), int32(s.H*s.W), int32(c/l), int32(st)))
	}
	return b.finish(y, b.launch(b.moves("unfold_frames"), false, int64(s.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(c), int32(st)))
}

// vec8 reports whether the data-movement kernels that copy 16 bytes
// (lanes values) at a time can move n elements of c channels between
// these addresses (nil ones aside): c a multiple of the lanes,
// 16-byte-aligned addresses, and fewer than 2^31 chunks for their 32-bit
// index math.
func (b *Backend) vec8(c, n int, ptrs ...cu.DevicePtr) bool {
	l := b.lanes()
	if b.scalarMoves || c%l != 0 || n/l >= 1<<31 {
		return false
	}
	for _, p := range ptrs {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// share returns a second tensor of x's storage, for ops whose result is
// their input: no copy, no memory. Ops never write into their inputs
// except the transformer ops that say so, which are given only tensors
// the model made itself.
func (b *Backend) share(x *Tensor) *Tensor {
	b.pool.retain(x.buf)
	return &Tensor{shape: x.shape, buf: x.buf, off: x.off, b: b, wide: x.wide}
}

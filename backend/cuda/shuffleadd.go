package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

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
	x, base, os, err := b.shuffleAddArgs(xt, baset, r, false)
	if err != nil {
		return nil, err
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

var _ backend.BilinearShuffleAdder = (*Backend)(nil)

// ShuffleAddBilinear returns PixelShuffle(x, r) + Resize(base, Bilinear,
// x r), the tail of CDA-VSR, in one kernel (backend.BilinearShuffleAdder):
// x in the storage type (or float32 on an f32 backend), base in the
// storage type or float32 (backend.Wide), the result in base's type.
func (b *Backend) ShuffleAddBilinear(xt, baset backend.Tensor, r int, order backend.ShuffleOrder) (backend.Tensor, error) {
	x, base, os, err := b.shuffleAddArgs(xt, baset, r, true)
	if err != nil {
		return nil, err
	}
	xs, bs := x.shape, base.shape
	src, dst, err := check.ResizeTiles(bs, backend.Bilinear, os.H, os.W, backend.Tile{}, backend.Tile{})
	if err != nil {
		return nil, err
	}
	ay, err := b.axis(backend.Bilinear, os.H, dst.Y, dst.FullH, bs.H, src.Y, src.FullH)
	if err != nil {
		return nil, err
	}
	ax, err := b.axis(backend.Bilinear, os.W, dst.X, dst.FullW, bs.W, src.X, src.FullW)
	if err != nil {
		return nil, err
	}
	y, err := b.allocAs(os, base.dt())
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("shuffle_add_bilinear_"+x.dt().String()+"_"+base.dt().String(), false, int64(os.N*os.H*os.W),
		x.ptr(), base.ptr(), y.ptr(), int32(xs.N), int32(xs.H), int32(xs.W), int32(r), int32(order),
		ay.idx.ptr, ay.wt.ptr, int32(ay.n), ax.idx.ptr, ax.wt.ptr, int32(ax.n)))
}

// shuffleAddArgs checks the shuffle-add kernels' arguments: x in the
// storage type, base too or (wideBase) float32, their shapes, RGB; it
// returns them and the output's shape.
func (b *Backend) shuffleAddArgs(xt, baset backend.Tensor, r int, wideBase bool) (x, base *Tensor, os backend.Shape, err error) {
	if x, err = b.tensor(xt); err != nil {
		return
	}
	if wideBase {
		base, err = b.anyTensor(baset)
	} else {
		base, err = b.tensor(baset)
	}
	if err != nil {
		return
	}
	if os, err = check.ShuffleAddShape(x.shape, base.shape, r); err != nil {
		return
	}
	if base.shape.C != 3 {
		err = fmt.Errorf("shuffle-add: the GPU kernel handles RGB, not %d channels", base.shape.C)
	}
	return
}

package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

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

package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

// PixelShuffle rearranges channels into r x r blocks.
func (b *Backend) PixelShuffle(xt backend.Tensor, r int, order backend.ShuffleOrder) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if r <= 0 || s.C%(r*r) != 0 {
		return nil, fmt.Errorf("pixel shuffle by %d: %d channels is not a multiple of %d", r, s.C, r*r)
	}
	oc := s.C / (r * r)
	y, err := b.alloc(backend.Shape{N: s.N, H: s.H * r, W: s.W * r, C: oc})
	if err != nil {
		return nil, err
	}
	if oc <= 4 && !b.scalarMoves {
		return b.finish(y, b.launch(b.moves("pixel_shuffle_px"), false, int64(y.shape.N*y.shape.H*y.shape.W), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(oc), int32(r), int32(order)))
	}
	return b.finish(y, b.launch("pixel_shuffle", true, int64(y.shape.Elems()), x.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(oc), int32(r), int32(order)))
}

// CopyChannels copies src into channels [at, at+src.C) of dst.
// The two may be of different types (backend.Wide): the values are
// converted.
func (b *Backend) CopyChannels(dstt backend.Tensor, at int, srct backend.Tensor) error {
	dst, src, err := b.anyTwo(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.Channels(dst.shape, at, src.shape); err != nil {
		return err
	}
	return b.copyChannels(src, dst, at)
}

// Channels returns channels [at, at+n) of x.
func (b *Backend) Channels(xt backend.Tensor, at, n int) (backend.Tensor, error) {
	x, err := b.anyTensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	s.C = n
	if err := check.Channels(x.shape, at, s); err != nil {
		return nil, err
	}
	y, err := b.allocAs(s, x.dt())
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.copyBlock(x, y, s.N*s.H*s.W, n, x.shape.C, at, n, 0))
}

// Band returns rows [y, y+h) of every frame of x, zeros outside it.
func (b *Backend) Band(xt backend.Tensor, y0, h int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	s.H = h
	if err := check.Band(x.shape, y0, s, true); err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	row := s.W * s.C
	if y0 < 0 || y0+h > x.shape.H { // zeros outside the frame
		return b.finish(y, b.launch(b.moves("band_rows"), false, int64(y.shape.Elems()), x.ptr(), y.ptr(),
			int64(s.N), int32(x.shape.H), int32(h), int64(row), int32(y0)))
	}
	return b.finish(y, b.copyBlock(x, y, s.N, h*row, x.shape.H*row, y0*row, h*row, 0))
}

// CopyBand copies src into rows [y, y+src.H) of every frame of dst.
func (b *Backend) CopyBand(dstt backend.Tensor, y0 int, srct backend.Tensor) error {
	dst, src, err := b.two(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.Band(dst.shape, y0, src.shape, false); err != nil {
		return err
	}
	s := src.shape
	row := s.W * s.C
	return b.copyBlock(src, dst, s.N, s.H*row, s.H*row, 0, dst.shape.H*row, y0*row)
}

// copyBlock copies rows blocks of n values, block r from src's value
// r*ss+so to dst's value r*ds+d0 (kernels.cu's copy_block), 16 bytes at a
// time where every size, offset and address allows.
func (b *Backend) copyBlock(src, dst *Tensor, rows, n, ss, so, ds, d0 int) error {
	sizes := []int{n, ss, so, ds, d0}
	es := src.dt().size()
	name, l := "copy_block8", 16/es
	vec := !b.scalarMoves && src.ptr()%16 == 0 && dst.ptr()%16 == 0
	for _, v := range sizes {
		vec = vec && v%l == 0
	}
	if !vec {
		name, l = movesOf("copy_block", es), 1
	}
	args := []any{src.ptr(), dst.ptr(), int64(rows)}
	for _, v := range sizes {
		args = append(args, int64(v/l))
	}
	return b.launch(name, false, int64(rows)*int64(n/l), args...)
}

package cpu

import (
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

// Resize resamples x to oh x ow, separably: each output row is the weighted
// sum of up to four horizontally resampled input rows.
func (b *Backend) Resize(xt backend.Tensor, mode backend.ResizeMode, oh, ow int, src, dst backend.Tile) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	src, dst, err = check.ResizeTiles(s, mode, oh, ow, src, dst)
	if err != nil {
		return nil, err
	}
	ay := check.MakeTaps(mode, oh, dst.Y, dst.FullH, s.H, src.Y, src.FullH)
	ax := check.MakeTaps(mode, ow, dst.X, dst.FullW, s.W, src.X, src.FullW)
	c := s.C
	out := b.alloc(backend.Shape{N: s.N, H: oh, W: ow, C: c})
	b.parallel(s.N*oh, func(r int) {
		n, oy := r/oh, r%oh
		o := out.Data[(n*oh+oy)*ow*c:][:ow*c]
		clear(o)
		tmp := make([]float32, ow*c)
		for ty := 0; ty < ay.N; ty++ {
			row := x.Data[(n*s.H+ay.Idx[oy*ay.N+ty])*s.W*c:][:s.W*c]
			wy := ay.Wt[oy*ay.N+ty]
			for ox := 0; ox < ow; ox++ {
				t := tmp[ox*c : (ox+1)*c]
				for ci := range t {
					var v float32
					for tx := 0; tx < ax.N; tx++ {
						v += row[ax.Idx[ox*ax.N+tx]*c+ci] * ax.Wt[ox*ax.N+tx]
					}
					t[ci] = v
				}
			}
			for i, v := range tmp {
				o[i] += v * wy
			}
		}
	})
	return out, nil
}

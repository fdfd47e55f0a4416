package cpu

import (
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
)

// axis holds, for each output index along one axis, up to four source
// indices (local to the input tensor) and their weights.
type axis struct {
	n   int // taps per output index
	idx []int
	wt  []float32
}

// cubic returns the Keys cubic convolution weights (A = -0.75) for the four
// taps around a sample at fraction t past the second tap, as ncnn and
// PyTorch compute them.
func cubic(t float32) [4]float32 {
	const A = -0.75
	x0, x1, x2 := t+1, t, 1-t
	var c [4]float32
	c[0] = ((A*x0-5*A)*x0+8*A)*x0 - 4*A
	c[1] = ((A+2)*x1-(A+3))*x1*x1 + 1
	c[2] = ((A+2)*x2-(A+3))*x2*x2 + 1
	c[3] = 1 - c[0] - c[1] - c[2]
	return c
}

// makeAxis computes the taps for out output samples starting at global
// index dstOff of a dstFull-long axis, reading a local input of srcLen
// samples placed at global index srcOff of a srcFull-long axis. All
// arithmetic uses global indices, so a tile computes exactly the values of
// the whole image.
func makeAxis(mode backend.ResizeMode, out, dstOff, dstFull, srcLen, srcOff, srcFull int) axis {
	n := map[backend.ResizeMode]int{backend.Nearest: 1, backend.Bilinear: 2, backend.Bicubic: 4}[mode]
	a := axis{n: n, idx: make([]int, out*n), wt: make([]float32, out*n)}
	local := func(g int) int { // clamp to the whole image, then to the tile
		g = min(max(g, 0), srcFull-1) - srcOff
		return min(max(g, 0), srcLen-1)
	}
	scale := float64(srcFull) / float64(dstFull)
	for i := 0; i < out; i++ {
		g := dstOff + i
		idx, wt := a.idx[i*n:(i+1)*n], a.wt[i*n:(i+1)*n]
		switch mode {
		case backend.Nearest:
			idx[0], wt[0] = local(g*srcFull/dstFull), 1
		case backend.Bilinear:
			f := max(float32((float64(g)+0.5)*scale-0.5), 0)
			s := int(math.Floor(float64(f)))
			f -= float32(s)
			idx[0], idx[1] = local(s), local(s+1)
			wt[0], wt[1] = 1-f, f
		case backend.Bicubic:
			f := float32((float64(g)+0.5)*scale - 0.5)
			s := int(math.Floor(float64(f)))
			c := cubic(f - float32(s))
			for k := 0; k < 4; k++ {
				idx[k], wt[k] = local(s-1+k), c[k]
			}
		}
	}
	return a
}

// Resize resamples x to oh x ow, separably: each output row is the weighted
// sum of up to four horizontally resampled input rows.
func (b *Backend) Resize(xt backend.Tensor, mode backend.ResizeMode, oh, ow int, src, dst backend.Window) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	if mode < backend.Nearest || mode > backend.Bicubic {
		return nil, fmt.Errorf("resize: unsupported mode %v", mode)
	}
	s := x.shape
	if oh <= 0 || ow <= 0 {
		return nil, fmt.Errorf("resize %dx%d to %dx%d: empty output", s.W, s.H, ow, oh)
	}
	if src.Whole() {
		src = backend.Window{FullH: s.H, FullW: s.W}
	}
	if dst.Whole() {
		dst = backend.Window{FullH: oh, FullW: ow}
	}
	ay := makeAxis(mode, oh, dst.Y, dst.FullH, s.H, src.Y, src.FullH)
	ax := makeAxis(mode, ow, dst.X, dst.FullW, s.W, src.X, src.FullW)
	c := s.C
	out := b.alloc(backend.Shape{N: s.N, H: oh, W: ow, C: c})
	b.parallel(s.N*oh, func(r int) {
		n, oy := r/oh, r%oh
		o := out.Data[(n*oh+oy)*ow*c:][:ow*c]
		clear(o)
		tmp := make([]float32, ow*c)
		for ty := 0; ty < ay.n; ty++ {
			row := x.Data[(n*s.H+ay.idx[oy*ay.n+ty])*s.W*c:][:s.W*c]
			wy := ay.wt[oy*ay.n+ty]
			for ox := 0; ox < ow; ox++ {
				t := tmp[ox*c : (ox+1)*c]
				for ci := range t {
					var v float32
					for tx := 0; tx < ax.n; tx++ {
						v += row[ax.idx[ox*ax.n+tx]*c+ci] * ax.wt[ox*ax.n+tx]
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

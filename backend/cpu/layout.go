package cpu

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

// PixelShuffle moves groups of r*r channels into r x r pixel blocks.
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
	os := backend.Shape{N: s.N, H: s.H * r, W: s.W * r, C: oc}
	out := b.alloc(os)
	b.parallel(s.N*s.H, func(row int) {
		n, y := row/s.H, row%s.H
		for xx := 0; xx < s.W; xx++ {
			src := x.Data[((n*s.H+y)*s.W+xx)*s.C:]
			for i := 0; i < r; i++ {
				for j := 0; j < r; j++ {
					dst := out.Data[((n*os.H+y*r+i)*os.W+xx*r+j)*oc:][:oc]
					for c := range dst {
						if order == backend.ShuffleCRD {
							dst[c] = src[c*r*r+i*r+j]
						} else {
							dst[c] = src[(i*r+j)*oc+c]
						}
					}
				}
			}
		}
	})
	return out, nil
}

// CopyChannels copies src into channels [at, at+src.C) of dst.
func (b *Backend) CopyChannels(dstt backend.Tensor, at int, srct backend.Tensor) error {
	dst, src, err := b.two(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.Channels(dst.shape, at, src.shape); err != nil {
		return err
	}
	s := src.shape
	copyBlock(src.Data, dst.Data, s.N*s.H*s.W, s.C, s.C, 0, dst.shape.C, at)
	return nil
}

// Channels returns channels [at, at+n) of x.
func (b *Backend) Channels(xt backend.Tensor, at, n int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	s.C = n
	if err := check.Channels(x.shape, at, s); err != nil {
		return nil, err
	}
	y := b.alloc(s)
	copyBlock(x.Data, y.Data, s.N*s.H*s.W, n, x.shape.C, at, n, 0)
	return y, nil
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
	y := b.alloc(s)
	row := s.W * s.C
	for f := range s.N {
		for r := range h {
			out := y.Data[(f*h+r)*row:][:row]
			if sy := y0 + r; sy >= 0 && sy < x.shape.H {
				copy(out, x.Data[(f*x.shape.H+sy)*row:][:row])
			} else {
				clear(out)
			}
		}
	}
	return y, nil
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
	copyBlock(src.Data, dst.Data, s.N, s.H*row, s.H*row, 0, dst.shape.H*row, y0*row)
	return nil
}

// copyBlock copies rows blocks of n values, block r from src[r*ss+so:] to
// dst[r*ds+d0:].
func copyBlock(src, dst []float32, rows, n, ss, so, ds, d0 int) {
	for r := range rows {
		copy(dst[r*ds+d0:][:n], src[r*ss+so:][:n])
	}
}

// ShuffleAddNearest computes PixelShuffle(x, r) + NearestUpsample(base, r)
// in one pass, with the same float operations as the separate ops.
func (b *Backend) ShuffleAddNearest(xt, baset backend.Tensor, r int, order backend.ShuffleOrder) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	base, err := b.tensor(baset)
	if err != nil {
		return nil, err
	}
	xs, bs := x.shape, base.shape
	os, err := check.ShuffleAddShape(xs, bs, r)
	if err != nil {
		return nil, err
	}
	oc := bs.C
	out := b.alloc(os)
	b.parallel(xs.N*xs.H, func(row int) {
		n, y := row/xs.H, row%xs.H
		for xx := 0; xx < xs.W; xx++ {
			p := (n*xs.H+y)*xs.W + xx
			src, bv := x.Data[p*xs.C:], base.Data[p*oc:]
			for i := 0; i < r; i++ {
				for j := 0; j < r; j++ {
					dst := out.Data[((n*os.H+y*r+i)*os.W+xx*r+j)*oc:][:oc]
					for c := range dst {
						ic := (i*r+j)*oc + c
						if order == backend.ShuffleCRD {
							ic = c*r*r + i*r + j
						}
						dst[c] = src[ic] + bv[c]
					}
				}
			}
		}
	})
	return out, nil
}

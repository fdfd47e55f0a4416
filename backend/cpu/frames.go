package cpu

import (
	"math"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
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
	out := b.alloc(os)
	b.parallel(os.N*os.H, func(row int) {
		n, y := row/os.H, row%os.H
		for xx := 0; xx < os.W; xx++ {
			dst := out.Data[((n*os.H+y)*os.W+xx)*os.C:][:os.C]
			for c := 0; c < s.C; c++ {
				for i := 0; i < r; i++ {
					for j := 0; j < r; j++ {
						dst[c*r*r+i*r+j] = x.Data[((n*s.H+y*r+i)*s.W+xx*r+j)*s.C+c]
					}
				}
			}
		}
	})
	return out, nil
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
	out := b.alloc(os)
	cw := min(w, s.W) * s.C
	b.parallel(s.N*h, func(row int) {
		n, y := row/h, row%h
		dst := out.Data[(n*h+y)*w*s.C:][:w*s.C]
		if y >= s.H {
			clear(dst)
			return
		}
		copy(dst, x.Data[(n*s.H+y)*s.W*s.C:][:cw])
		clear(dst[cw:])
	})
	return out, nil
}

// Frames copies frames [start, start+n).
func (b *Backend) Frames(xt backend.Tensor, start, n int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	os, err := check.FramesShape(s, start, n)
	if err != nil {
		return nil, err
	}
	fs := s.H * s.W * s.C
	out := b.alloc(os)
	copy(out.Data, x.Data[start*fs:(start+n)*fs])
	return out, nil
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
	out := b.alloc(os)
	off := 0
	for _, p := range parts {
		off += copy(out.Data[off:], p.Data)
	}
	return out, nil
}

// Empty returns an uninitialised tensor.
func (b *Backend) Empty(s backend.Shape) (backend.Tensor, error) { return b.alloc(s), nil }

// CopyFrames copies src into dst's frames from at on.
func (b *Backend) CopyFrames(dstt backend.Tensor, at int, srct backend.Tensor) error {
	dst, src, err := b.two(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.CopyFrames(dst.shape, at, src.shape); err != nil {
		return err
	}
	copy(dst.Data[at*dst.shape.H*dst.shape.W*dst.shape.C:], src.Data)
	return nil
}

// ConcatPrev pairs each frame with the one before it along channels.
func (b *Backend) ConcatPrev(xt, prevt backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	var prev []float32
	var ps *backend.Shape
	if prevt != nil {
		p, err := b.tensor(prevt)
		if err != nil {
			return nil, err
		}
		prev, ps = p.Data, &p.shape
	}
	os, err := check.ConcatPrevShape(s, ps)
	if err != nil {
		return nil, err
	}
	out := b.alloc(os)
	px := s.H * s.W
	b.parallel(s.N*s.H, func(row int) {
		n, y := row/s.H, row%s.H
		for xx := 0; xx < s.W; xx++ {
			p := y*s.W + xx
			dst := out.Data[((n*px)+p)*2*s.C:][:2*s.C]
			copy(dst, x.Data[(n*px+p)*s.C:][:s.C])
			switch {
			case n > 0:
				copy(dst[s.C:], x.Data[((n-1)*px+p)*s.C:][:s.C])
			case prev != nil:
				copy(dst[s.C:], prev[p*s.C:][:s.C])
			default:
				clear(dst[s.C:])
			}
		}
	})
	return out, nil
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
	out := b.alloc(os)
	px := s.H * s.W
	b.parallel(s.N, func(f int) {
		g, j := f/st, f%st
		for p := 0; p < px; p++ {
			copy(out.Data[(g*px+p)*st*s.C+j*s.C:][:s.C], x.Data[(f*px+p)*s.C:][:s.C])
		}
	})
	return out, nil
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
	out := b.alloc(os)
	px := s.H * s.W
	b.parallel(s.N*st, func(f int) {
		g, j := f/st, f%st
		for p := 0; p < px; p++ {
			copy(out.Data[(f*px+p)*c:][:c], x.Data[(g*px+p)*s.C+j*c:][:c])
		}
	})
	return out, nil
}

func softClamp(v, alpha float32) float32 {
	return alpha * float32(math.Tanh(float64(v/alpha)))
}

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
	cols := make([]int, os.W)
	for i := range cols {
		cols[i] = check.PadSource(i, s.W, left, right, mode)
	}
	out := b.alloc(os)
	b.parallel(os.N*os.H, func(row int) {
		n, y := row/os.H, row%os.H
		dst := out.Data[row*os.W*s.C:][:os.W*s.C]
		sy := check.PadSource(y, s.H, top, bottom, mode)
		if sy < 0 {
			clear(dst)
			return
		}
		src := x.Data[(n*s.H+sy)*s.W*s.C:][:s.W*s.C]
		for i, sx := range cols {
			if sx < 0 {
				clear(dst[i*s.C:][:s.C])
			} else {
				copy(dst[i*s.C:][:s.C], src[sx*s.C:][:s.C])
			}
		}
	})
	return out, nil
}

// ChannelMean returns each frame's channel means, summed in float64
// (backend.UNet).
func (b *Backend) ChannelMean(xt backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	out := b.alloc(backend.Shape{N: s.N, H: 1, W: 1, C: s.C})
	px := s.H * s.W
	b.parallel(s.N, func(n int) {
		sum := make([]float64, s.C)
		for p, v := range x.Data[n*px*s.C:][:px*s.C] {
			sum[p%s.C] += float64(v)
		}
		for c, v := range sum {
			out.Data[n*s.C+c] = float32(v / float64(px))
		}
	})
	return out, nil
}

// ScaleChannels multiplies each channel of each frame by its factor
// (backend.UNet).
func (b *Backend) ScaleChannels(xt, st backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	f, err := b.tensor(st)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if err := check.ScaleChannelsShapes(s, f.shape); err != nil {
		return nil, err
	}
	out := b.alloc(s)
	b.parallel(s.N*s.H, func(row int) {
		k := f.Data[row/s.H*s.C:][:s.C]
		src, dst := x.Data[row*s.W*s.C:][:s.W*s.C], out.Data[row*s.W*s.C:][:s.W*s.C]
		for i, v := range src {
			dst[i] = v * k[i%s.C]
		}
	})
	return out, nil
}

// GroupNorm normalises each frame's channel groups over its pixels, in
// float64, and adds res (backend.Norm).
func (b *Backend) GroupNorm(xt backend.Tensor, groups int, scale, shift backend.Tensor, eps float32, rt backend.Tensor) (backend.Tensor, error) {
	x, a, c, err := b.normArgs(xt, groups, scale, shift)
	if err != nil {
		return nil, err
	}
	s := x.shape
	var res []float32
	if rt != nil {
		r, err := b.tensor(rt)
		if err != nil {
			return nil, err
		}
		if err := check.NormAdd(s, r.shape); err != nil {
			return nil, err
		}
		res = r.Data
	}
	px, cg := s.H*s.W, s.C/groups
	out := b.alloc(s)
	b.parallel(s.N*groups, func(i int) {
		n, g := i/groups, i%groups
		frame, dst := x.Data[n*px*s.C:][:px*s.C], out.Data[n*px*s.C:][:px*s.C]
		var sum, sq float64
		for p := 0; p < px; p++ {
			for _, v := range frame[p*s.C+g*cg:][:cg] {
				sum += float64(v)
			}
		}
		mean := sum / float64(px*cg)
		for p := 0; p < px; p++ {
			for _, v := range frame[p*s.C+g*cg:][:cg] {
				sq += (float64(v) - mean) * (float64(v) - mean)
			}
		}
		r := 1 / math.Sqrt(sq/float64(px*cg)+float64(eps))
		for p := 0; p < px; p++ {
			for k := g * cg; k < (g+1)*cg; k++ {
				dst[p*s.C+k] = float32((float64(frame[p*s.C+k])-mean)*r)*a.Data[k] + c.Data[k]
			}
		}
		if res != nil {
			add := res[n*px*s.C:][:px*s.C]
			for p := 0; p < px; p++ {
				for k := g * cg; k < (g+1)*cg; k++ {
					dst[p*s.C+k] += add[p*s.C+k]
				}
			}
		}
	})
	return out, nil
}

// ChannelNorm normalises each pixel's channels, in float64 (backend.Norm).
func (b *Backend) ChannelNorm(xt backend.Tensor, scale, shift backend.Tensor, eps float32) (backend.Tensor, error) {
	x, a, c, err := b.normArgs(xt, 1, scale, shift)
	if err != nil {
		return nil, err
	}
	s := x.shape
	out := b.alloc(s)
	b.parallel(s.N*s.H, func(row int) {
		src, dst := x.Data[row*s.W*s.C:][:s.W*s.C], out.Data[row*s.W*s.C:][:s.W*s.C]
		for p := 0; p < s.W; p++ {
			v := src[p*s.C:][:s.C]
			var sum, sq float64
			for _, f := range v {
				sum += float64(f)
			}
			mean := sum / float64(s.C)
			for _, f := range v {
				sq += (float64(f) - mean) * (float64(f) - mean)
			}
			r := 1 / math.Sqrt(sq/float64(s.C)+float64(eps))
			for k, f := range v {
				dst[p*s.C+k] = float32((float64(f)-mean)*r)*a.Data[k] + c.Data[k]
			}
		}
	})
	return out, nil
}

// normArgs checks GroupNorm's and ChannelNorm's arguments.
func (b *Backend) normArgs(xt backend.Tensor, groups int, scale, shift backend.Tensor) (x, a, c *Tensor, err error) {
	if x, err = b.tensor(xt); err != nil {
		return
	}
	if a, err = b.tensor(scale); err != nil {
		return
	}
	if c, err = b.tensor(shift); err != nil {
		return
	}
	err = check.Norm(x.shape, groups, a.shape, c.shape)
	return
}

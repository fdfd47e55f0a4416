package cpu

import (
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
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
	os := backend.Shape{N: s.N, H: s.H / r, W: s.W / r, C: s.C * r * r}
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
	if h <= 0 || w <= 0 {
		return nil, fmt.Errorf("crop/pad to %dx%d", w, h)
	}
	out := b.alloc(backend.Shape{N: s.N, H: h, W: w, C: s.C})
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
	if start < 0 || n <= 0 || start+n > s.N {
		return nil, fmt.Errorf("frames [%d, %d) of a %d-frame tensor", start, start+n, s.N)
	}
	fs := s.H * s.W * s.C
	out := b.alloc(backend.Shape{N: n, H: s.H, W: s.W, C: s.C})
	copy(out.Data, x.Data[start*fs:(start+n)*fs])
	return out, nil
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
	out := b.alloc(backend.Shape{N: n, H: s.H, W: s.W, C: s.C})
	off := 0
	for _, p := range parts {
		off += copy(out.Data[off:], p.Data)
	}
	return out, nil
}

// ConcatPrev pairs each frame with the one before it along channels.
func (b *Backend) ConcatPrev(xt, prevt backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	var prev []float32
	if prevt != nil {
		p, err := b.tensor(prevt)
		if err != nil {
			return nil, err
		}
		if p.shape != (backend.Shape{N: 1, H: s.H, W: s.W, C: s.C}) {
			return nil, fmt.Errorf("previous frame %v does not fit frames %v", p.shape, s)
		}
		prev = p.Data
	}
	out := b.alloc(backend.Shape{N: s.N, H: s.H, W: s.W, C: 2 * s.C})
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
	if st <= 0 || s.N%st != 0 {
		return nil, fmt.Errorf("fold %d frames by %d", s.N, st)
	}
	out := b.alloc(backend.Shape{N: s.N / st, H: s.H, W: s.W, C: s.C * st})
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
	if st <= 0 || s.C%st != 0 {
		return nil, fmt.Errorf("unfold %d channels by %d", s.C, st)
	}
	c := s.C / st
	out := b.alloc(backend.Shape{N: s.N * st, H: s.H, W: s.W, C: c})
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

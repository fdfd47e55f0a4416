package cpu

import (
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

// nearestCoord is PyTorch's float32 path for one coordinate c of an axis
// of n pixels: normalise (2c/(n-1) - 1), un-normalise with
// align_corners=True ((g+1)/2*(n-1)), clamp to the border, round half to
// even.
func nearestCoord(c float32, n int) int {
	if n == 1 {
		return 0
	}
	m := float32(n - 1)
	// Each step rounds to float32, as PyTorch's (the conversions keep the
	// compiler from fusing a multiply and an add).
	g := float32(float32(2*c)/m) - 1
	u := float32(float32(g+1)/2) * m
	u = min(max(u, 0), m)
	return int(math.RoundToEven(float64(u)))
}

// motionArgs unwraps x and the per-pixel map m of c channels.
func (b *Backend) motionArgs(xt, mt backend.Tensor, c int, what string) (*Tensor, *Tensor, error) {
	x, m, err := b.two(xt, mt)
	if err != nil {
		return nil, nil, err
	}
	return x, m, check.Motion(x.shape, m.shape, c, what)
}

// WarpNearest samples x at p + mv(p) (see backend.Motion).
func (b *Backend) WarpNearest(xt, mvt backend.Tensor) (backend.Tensor, error) {
	x, mv, err := b.motionArgs(xt, mvt, 2, "warp: motion field")
	if err != nil {
		return nil, err
	}
	s := x.shape
	out := b.alloc(s)
	b.parallel(s.N*s.H, func(r int) {
		n, y := r/s.H, r%s.H
		for px := 0; px < s.W; px++ {
			i := (n*s.H+y)*s.W + px
			sx := nearestCoord(float32(px)+mv.Data[2*i], s.W)
			sy := nearestCoord(float32(y)+mv.Data[2*i+1], s.H)
			copy(out.Data[i*s.C:(i+1)*s.C], x.Data[((n*s.H+sy)*s.W+sx)*s.C:][:s.C])
		}
	})
	return out, nil
}

// DeformSample is the modulated deformable sampling (see backend.Motion),
// in mmcv's dmcn_im2col_bilinear arithmetic.
func (b *Backend) DeformSample(xt, ot, mvt backend.Tensor, groups int, limit float32) (backend.Tensor, error) {
	x, mv, err := b.motionArgs(xt, mvt, 2, "deform: motion field")
	if err != nil {
		return nil, err
	}
	s := x.shape
	if groups <= 0 || s.C%groups != 0 {
		return nil, fmt.Errorf("deform: %d channels in %d groups", s.C, groups)
	}
	_, o, err := b.motionArgs(xt, ot, 3*groups, "deform: offsets and masks")
	if err != nil {
		return nil, err
	}
	out := b.alloc(s)
	cg := s.C / groups
	b.parallel(s.N*s.H, func(r int) {
		n, y := r/s.H, r%s.H
		img := x.Data[n*s.H*s.W*s.C:][:s.H*s.W*s.C]
		for px := 0; px < s.W; px++ {
			i := (n*s.H+y)*s.W + px
			oi := o.Data[i*3*groups:][:3*groups]
			dst := out.Data[i*s.C:][:s.C]
			for g := 0; g < groups; g++ {
				dy := limit*float32(math.Tanh(float64(oi[2*g]))) + mv.Data[2*i+1]
				dx := limit*float32(math.Tanh(float64(oi[2*g+1]))) + mv.Data[2*i]
				mask := float32(1 / (1 + math.Exp(-float64(oi[2*groups+g]))))
				bilinear(dst[g*cg:(g+1)*cg], img, s, g*cg, float32(y)+dy, float32(px)+dx, mask)
			}
		}
	})
	return out, nil
}

// bilinear writes mask times img's channels [c0, c0+len(dst)) sampled at
// (h, w), with mmcv's zero outside the image.
func bilinear(dst, img []float32, s backend.Shape, c0 int, h, w, mask float32) {
	if !(h > -1 && w > -1 && h < float32(s.H) && w < float32(s.W)) {
		clear(dst)
		return
	}
	hl, wl := float32(math.Floor(float64(h))), float32(math.Floor(float64(w)))
	lh, lw := h-hl, w-wl
	hh, hw := 1-lh, 1-lw
	y0, x0 := int(hl), int(wl)
	w1, w2, w3, w4 := hh*hw, hh*lw, lh*hw, lh*lw
	at := func(y, x, c int) float32 {
		if y < 0 || x < 0 || y >= s.H || x >= s.W {
			return 0
		}
		return img[(y*s.W+x)*s.C+c]
	}
	for k := range dst {
		c := c0 + k
		v := w1*at(y0, x0, c) + w2*at(y0, x0+1, c) + w3*at(y0+1, x0, c) + w4*at(y0+1, x0+1, c)
		dst[k] = mask * v
	}
}

// Gate scales x by (1 + w) or sigmoid(w) (see backend.Motion).
func (b *Backend) Gate(xt, wt backend.Tensor, sigmoid bool) (backend.Tensor, error) {
	x, w, err := b.motionArgs(xt, wt, 1, "gate: map")
	if err != nil {
		return nil, err
	}
	s := x.shape
	out := b.alloc(s)
	b.parallel(s.N*s.H, func(r int) {
		for px := r * s.W; px < (r+1)*s.W; px++ {
			g := 1 + w.Data[px]
			if sigmoid {
				g = float32(1 / (1 + math.Exp(-float64(w.Data[px]))))
			}
			for c := px * s.C; c < (px+1)*s.C; c++ {
				out.Data[c] = x.Data[c] * g
			}
		}
	})
	return out, nil
}

// MeanAbs returns each tensor's mean absolute value (see backend.Motion).
func (b *Backend) MeanAbs(ts ...backend.Tensor) ([]float64, error) {
	out := make([]float64, len(ts))
	for i, tt := range ts {
		t, err := b.tensor(tt)
		if err != nil {
			return nil, err
		}
		var s float64
		for _, v := range t.Data {
			s += math.Abs(float64(v))
		}
		out[i] = s / float64(len(t.Data))
	}
	return out, nil
}

// MatchBlocks is block matching with quarter-pel refinement (see
// backend.Motion).
func (b *Backend) MatchBlocks(curt, prevt backend.Tensor, block, rng int, scale float32) (backend.Tensor, backend.Tensor, error) {
	cur, prev, err := b.motionArgs(curt, prevt, 1, "match: previous plane")
	if err != nil {
		return nil, nil, err
	}
	s := cur.shape
	if s.C != 1 || block < 1 || block > 64 || rng < 0 || rng > 64 {
		return nil, nil, fmt.Errorf("match: %d-channel planes, block %d, range %d (want 1 channel, block 1-64, range 0-64)", s.C, block, rng)
	}
	mv := b.alloc(backend.Shape{N: s.N, H: s.H, W: s.W, C: 2})
	res := b.alloc(backend.Shape{N: s.N, H: s.H, W: s.W, C: 1})
	bw, bh := (s.W+block-1)/block, (s.H+block-1)/block
	plane := s.H * s.W
	b.parallel(s.N*bh, func(r int) {
		n, by := r/bh, r%bh
		m := matcher{w: s.W, h: s.H, block: block, rng: rng, scale: scale,
			cur: cur.Data[n*plane:][:plane], prev: prev.Data[n*plane:][:plane],
			mv: mv.Data[2*n*plane:][:2*plane], res: res.Data[n*plane:][:plane]}
		for bx := 0; bx < bw; bx++ {
			m.match(bx*block, by*block, min(block, s.W-bx*block), min(block, s.H-by*block))
		}
	})
	return mv, res, nil
}

// matcher is one plane's block matching.
type matcher struct {
	w, h, block, rng int
	scale            float32
	cur, prev        []float32
	mv, res          []float32
}

// sample is the bilinear value of prev at (x, y), coordinates clamped.
func (m *matcher) sample(x, y float32) float32 {
	x = min(max(x, 0), float32(m.w-1))
	y = min(max(y, 0), float32(m.h-1))
	x0, y0 := int(x), int(y)
	x1, y1 := min(x0+1, m.w-1), min(y0+1, m.h-1)
	fx, fy := x-float32(x0), y-float32(y0)
	p := m.prev
	a := p[y0*m.w+x0] + fx*(p[y0*m.w+x1]-p[y0*m.w+x0])
	c := p[y1*m.w+x0] + fx*(p[y1*m.w+x1]-p[y1*m.w+x0])
	return a + fy*(c-a)
}

// match finds the vector of the block at (bx0, by0) of bw x bh pixels.
func (m *matcher) match(bx0, by0, bw, bh int) {
	w, h := m.w, m.h
	margin := m.block / 2
	x0, y0 := max(bx0-margin, 0), max(by0-margin, 0)
	x1, y1 := min(bx0+bw+margin, w), min(by0+bh+margin, h)
	sad := func(dx, dy int, limit float32) float32 {
		var s float32
		for y := y0; y < y1; y++ {
			sy := min(max(y+dy, 0), h-1)
			for x := x0; x < x1; x++ {
				sx := min(max(x+dx, 0), w-1)
				s += float32(math.Abs(float64(m.cur[y*w+x] - m.prev[sy*w+sx])))
			}
			if s >= limit {
				return s
			}
		}
		return s
	}
	best := sad(0, 0, float32(math.Inf(1)))
	vx, vy := float32(0), float32(0)
	for dy := -m.rng; dy <= m.rng; dy++ {
		for dx := -m.rng; dx <= m.rng; dx++ {
			if dx == 0 && dy == 0 {
				continue
			}
			if s := sad(dx, dy, best); s < best {
				best, vx, vy = s, float32(dx), float32(dy)
			}
		}
	}
	fsad := func(tx, ty float32) float32 {
		var s float32
		for y := y0; y < y1; y++ {
			for x := x0; x < x1; x++ {
				s += float32(math.Abs(float64(m.cur[y*w+x] - m.sample(float32(x)+tx, float32(y)+ty))))
			}
		}
		return s
	}
	for _, step := range []float32{0.5, 0.25} {
		cx, cy := vx, vy
		for _, d := range [8][2]float32{{-1, -1}, {0, -1}, {1, -1}, {-1, 0}, {1, 0}, {-1, 1}, {0, 1}, {1, 1}} {
			tx, ty := cx+step*d[0], cy+step*d[1]
			if s := fsad(tx, ty); s < best {
				best, vx, vy = s, tx, ty
			}
		}
	}
	for y := by0; y < by0+bh; y++ {
		for x := bx0; x < bx0+bw; x++ {
			i := y*w + x
			m.mv[2*i], m.mv[2*i+1] = vx, vy
			m.res[i] = (m.cur[i] - m.sample(float32(x)+vx, float32(y)+vy)) * m.scale
		}
	}
}

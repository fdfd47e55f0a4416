package cdavsr

import (
	"math"
	"runtime"
	"sync"
)

// Side data is what the network reads besides the frame: for each pixel p
// a motion vector mv (in low-resolution pixels, x then y) such that p came
// from p + mv in the previous frame, and the luma residual
// (Y_t(p) - Y_{t-1}(p + mv)) divided by the luma range. Codecs carry both,
// but the ffmpeg executable exports neither, so vsr estimates them from the
// decoded frames: block matching on the luma, as a codec's motion search
// does, with quarter-pel refinement.

// Luma converts packed RGB24 to full-range luma (BT.601 weights, 0..255):
// the residual's range is then 255.
func Luma(rgb []byte, dst []float32) {
	for i := range dst {
		r, g, b := float32(rgb[3*i]), float32(rgb[3*i+1]), float32(rgb[3*i+2])
		dst[i] = 0.299*r + 0.587*g + 0.114*b
	}
}

// LumaRange is the black-to-white range of Luma's output.
const LumaRange = 255

// Matcher estimates motion between consecutive luma planes of w x h by
// block matching: Block x Block blocks, an exhaustive whole-pixel search
// within Range pixels, then half- and quarter-pel refinement on the
// bilinearly sampled previous frame.
type Matcher struct {
	W, H, Block, Range int
}

// sample is the bilinear value of plane (w x h) at (x, y), coordinates
// clamped to the image.
func sample(plane []float32, w, h int, x, y float32) float32 {
	x = min(max(x, 0), float32(w-1))
	y = min(max(y, 0), float32(h-1))
	x0, y0 := int(x), int(y)
	x1, y1 := min(x0+1, w-1), min(y0+1, h-1)
	fx, fy := x-float32(x0), y-float32(y0)
	a := plane[y0*w+x0] + fx*(plane[y0*w+x1]-plane[y0*w+x0])
	b := plane[y1*w+x0] + fx*(plane[y1*w+x1]-plane[y1*w+x0])
	return a + fy*(b-a)
}

// Estimate fills mv (h w 2, x then y) and res (h w) for the current luma
// cur against prev.
func (m Matcher) Estimate(cur, prev, mv, res []float32) {
	w, h, bs := m.W, m.H, max(m.Block, 1)
	bw, bh := (w+bs-1)/bs, (h+bs-1)/bs
	var wg sync.WaitGroup
	next := make(chan int, bh)
	for by := 0; by < bh; by++ {
		next <- by
	}
	close(next)
	for range min(runtime.GOMAXPROCS(0), bh) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for by := range next {
				for bx := 0; bx < bw; bx++ {
					m.block(cur, prev, mv, res, bx*bs, by*bs, min(bs, w-bx*bs), min(bs, h-by*bs))
				}
			}
		}()
	}
	wg.Wait()
}

// block matches the block at (x0, y0) of bw x bh pixels. The cost is the
// SAD over the block widened by half a block on each side (within the
// image): more texture, fewer false matches in flat or repetitive areas.
func (m Matcher) block(cur, prev, mv, res []float32, bx0, by0, bbw, bbh int) {
	w, h := m.W, m.H
	margin := max(m.Block/2, 0)
	x0, y0 := max(bx0-margin, 0), max(by0-margin, 0)
	bw, bh := min(bx0+bbw+margin, w)-x0, min(by0+bbh+margin, h)-y0
	// Whole pixels: the smallest SAD, the zero vector first and kept on ties.
	sad := func(dx, dy int, limit float32) float32 {
		var s float32
		for y := y0; y < y0+bh; y++ {
			sy := min(max(y+dy, 0), h-1)
			for x := x0; x < x0+bw; x++ {
				sx := min(max(x+dx, 0), w-1)
				s += float32(math.Abs(float64(cur[y*w+x] - prev[sy*w+sx])))
			}
			if s >= limit {
				return s
			}
		}
		return s
	}
	best := sad(0, 0, float32(math.Inf(1)))
	bx, by := 0, 0
	for dy := -m.Range; dy <= m.Range; dy++ {
		for dx := -m.Range; dx <= m.Range; dx++ {
			if dx == 0 && dy == 0 {
				continue
			}
			if s := sad(dx, dy, best); s < best {
				best, bx, by = s, dx, dy
			}
		}
	}
	// Half and quarter pixels around the best.
	fsad := func(vx, vy float32) float32 {
		var s float32
		for y := y0; y < y0+bh; y++ {
			for x := x0; x < x0+bw; x++ {
				s += float32(math.Abs(float64(cur[y*w+x] - sample(prev, w, h, float32(x)+vx, float32(y)+vy))))
			}
		}
		return s
	}
	vx, vy := float32(bx), float32(by)
	for _, step := range []float32{0.5, 0.25} {
		cx, cy := vx, vy
		for _, d := range [8][2]float32{{-1, -1}, {0, -1}, {1, -1}, {-1, 0}, {1, 0}, {-1, 1}, {0, 1}, {1, 1}} {
			tx, ty := cx+step*d[0], cy+step*d[1]
			if s := fsad(tx, ty); s < best {
				best, vx, vy = s, tx, ty
			}
		}
	}
	for y := by0; y < by0+bbh; y++ {
		for x := bx0; x < bx0+bbw; x++ {
			i := y*w + x
			mv[2*i], mv[2*i+1] = vx, vy
			res[i] = (cur[i] - sample(prev, w, h, float32(x)+vx, float32(y)+vy)) / LumaRange
		}
	}
}

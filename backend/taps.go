package backend

import "math"

// Taps holds, for each output index along one axis of a resize, up to
// four source indices (local to the input tensor) and their weights. Every
// backend resamples with these, so they agree exactly on where samples
// come from.
type Taps struct {
	N   int // taps per output index
	Idx []int
	Wt  []float32
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

// MakeTaps computes the taps for out output samples starting at global
// index dstOff of a dstFull-long axis, reading a local input of srcLen
// samples placed at global index srcOff of a srcFull-long axis. All
// arithmetic uses global indices, so a tile computes exactly the values of
// the whole image.
func MakeTaps(mode ResizeMode, out, dstOff, dstFull, srcLen, srcOff, srcFull int) Taps {
	n := map[ResizeMode]int{Nearest: 1, Bilinear: 2, Bicubic: 4}[mode]
	a := Taps{N: n, Idx: make([]int, out*n), Wt: make([]float32, out*n)}
	local := func(g int) int { // clamp to the whole image, then to the tile
		g = min(max(g, 0), srcFull-1) - srcOff
		return min(max(g, 0), srcLen-1)
	}
	scale := float64(srcFull) / float64(dstFull)
	for i := 0; i < out; i++ {
		g := dstOff + i
		idx, wt := a.Idx[i*n:(i+1)*n], a.Wt[i*n:(i+1)*n]
		switch mode {
		case Nearest:
			idx[0], wt[0] = local(g*srcFull/dstFull), 1
		case Bilinear:
			f := max(float32((float64(g)+0.5)*scale-0.5), 0)
			s := int(math.Floor(float64(f)))
			f -= float32(s)
			idx[0], idx[1] = local(s), local(s+1)
			wt[0], wt[1] = 1-f, f
		case Bicubic:
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

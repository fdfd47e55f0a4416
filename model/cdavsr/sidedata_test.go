package cdavsr

import (
	"math"
	"os"
	"testing"
)

// TestMatcher: a real frame translated by known sub-pixel amounts is
// recovered within a quarter pixel away from the borders, and a static
// scene has zero motion and zero residual.
func TestMatcher(t *testing.T) {
	rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	const w, h = 48, 32
	prev := make([]float32, w*h)
	Luma(rgb, prev)
	m := Matcher{W: w, H: h, Block: 8, Range: 4}
	mv, res := make([]float32, 2*w*h), make([]float32, w*h)
	m.Estimate(prev, prev, mv, res)
	for i := range res {
		if mv[2*i] != 0 || mv[2*i+1] != 0 || res[i] != 0 {
			t.Fatalf("static scene: pixel %d has motion (%g, %g) and residual %g", i, mv[2*i], mv[2*i+1], res[i])
		}
	}
	for _, d := range [][2]float32{{1.25, -0.75}, {-2.5, 0.5}, {0.75, 2}} {
		cur := make([]float32, w*h)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				cur[y*w+x] = sample(prev, w, h, float32(x)+d[0], float32(y)+d[1])
			}
		}
		m.Estimate(cur, prev, mv, res)
		for y := 8; y < h-8; y++ {
			for x := 8; x < w-8; x++ {
				i := y*w + x
				if math.Abs(float64(mv[2*i]-d[0])) > 0.25 || math.Abs(float64(mv[2*i+1]-d[1])) > 0.25 {
					t.Fatalf("shift %v: pixel (%d,%d) has motion (%g, %g)", d, x, y, mv[2*i], mv[2*i+1])
				}
			}
		}
	}
}

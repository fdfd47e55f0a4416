package cdavsr

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// bilinearAt samples plane (w x h) at (x, y), coordinates clamped.
func bilinearAt(p []float32, w, h int, x, y float32) float32 {
	x = min(max(x, 0), float32(w-1))
	y = min(max(y, 0), float32(h-1))
	x0, y0 := int(x), int(y)
	x1, y1 := min(x0+1, w-1), min(y0+1, h-1)
	fx, fy := x-float32(x0), y-float32(y0)
	a := p[y0*w+x0] + fx*(p[y0*w+x1]-p[y0*w+x0])
	c := p[y1*w+x0] + fx*(p[y1*w+x1]-p[y1*w+x0])
	return a + fy*(c-a)
}

// TestMatcher: a real frame translated by known sub-pixel amounts is
// recovered within a quarter pixel away from the borders, and a static
// scene has zero motion and zero residual.
func TestMatcher(t *testing.T) {
	rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	const w, h = 48, 32
	testMatcher(t, cpu.New(0), rgb, w, h)
}

// testMatcher runs the matching checks on b.
func testMatcher(t *testing.T, b backend.Backend, rgb []byte, w, h int) {
	prev := make([]float32, w*h)
	for i := range prev {
		prev[i] = 0.299*float32(rgb[3*i]) + 0.587*float32(rgb[3*i+1]) + 0.114*float32(rgb[3*i+2])
	}
	plane := backend.Shape{N: 1, H: h, W: w, C: 1}
	estimate := func(cur []float32) ([]float32, []float32) {
		c, _ := b.Upload(plane, cur)
		p, _ := b.Upload(plane, prev)
		defer c.Free()
		defer p.Free()
		mvt, rest, err := b.(backend.Motion).MatchBlocks(c, p, Block, 4, 1.0/LumaRange)
		if err != nil {
			t.Fatal(err)
		}
		mv, _ := b.Download(mvt)
		res, _ := b.Download(rest)
		mvt.Free()
		rest.Free()
		return mv, res
	}
	mv, res := estimate(prev)
	for i := range res {
		if mv[2*i] != 0 || mv[2*i+1] != 0 || res[i] != 0 {
			t.Fatalf("static scene: pixel %d has motion (%g, %g) and residual %g", i, mv[2*i], mv[2*i+1], res[i])
		}
	}
	for _, d := range [][2]float32{{1.25, -0.75}, {-2.5, 0.5}, {0.75, 2}} {
		cur := make([]float32, w*h)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				cur[y*w+x] = bilinearAt(prev, w, h, float32(x)+d[0], float32(y)+d[1])
			}
		}
		mv, res = estimate(cur)
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

// TestNPY: a written .npy reads back; another dtype, order or shape is
// refused with what was found.
func TestNPY(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/a.npy"
	v := []float32{1, -2.5, 3.25, 0, 7, 8}
	if err := writeNPY(p, []int{2, 1, 3}, v); err != nil {
		t.Fatal(err)
	}
	d, _ := os.ReadFile(p)
	if hl := int(d[8]) | int(d[9])<<8; (10+hl)%64 != 0 || d[10+hl-1] != '\n' {
		t.Errorf("header of %d bytes is not padded to 64 with a newline", hl)
	}
	got, err := readNPY(p, []int{2, 1, 3})
	if err != nil || relErr(got, v) != 0 {
		t.Fatalf("read back %v (%v)", got, err)
	}
	if _, err := readNPY(p, []int{1, 2, 3}); err == nil || !strings.Contains(err.Error(), "has shape [2 1 3]; want [1 2 3]") {
		t.Errorf("wrong shape: %v", err)
	}
	os.WriteFile(p, bytes.Replace(d, []byte("<f4"), []byte("<f8"), 1), 0o644)
	if _, err := readNPY(p, []int{2, 1, 3}); err == nil || !strings.Contains(err.Error(), "holds <f8 data") {
		t.Errorf("float64: %v", err)
	}
	os.WriteFile(p, []byte("not npy"), 0o644)
	if _, err := readNPY(p, []int{2, 1, 3}); err == nil || !strings.Contains(err.Error(), "not a NumPy .npy file") {
		t.Errorf("garbage: %v", err)
	}
}

// FuzzNPY: damaged .npy files never panic.
func FuzzNPY(f *testing.F) {
	dir := f.TempDir()
	writeNPY(dir+"/seed.npy", []int{2, 2, 3}, make([]float32, 12))
	seed, _ := os.ReadFile(dir + "/seed.npy")
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		p := t.TempDir() + "/f.npy"
		os.WriteFile(p, data, 0o644)
		readNPY(p, []int{2, 2, 3})
	})
}

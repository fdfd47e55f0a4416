package cpu

import (
	"slices"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

func seq(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i + 1)
	}
	return v
}

func get(t *testing.T, b *Backend, x backend.Tensor, err error) []float32 {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := b.Download(x)
	return v
}

func TestFrameOps(t *testing.T) {
	b := New(2)
	s := backend.Shape{N: 4, H: 2, W: 2, C: 3}
	x, _ := b.Upload(s, seq(s.Elems()))
	at := func(v []float32, sh backend.Shape, n, y, xx, c int) float32 {
		return v[((n*sh.H+y)*sh.W+xx)*sh.C+c]
	}
	// Fold 2 frames into channels and back.
	f, err := b.FoldFrames(x, 2)
	fv := get(t, b, f, err)
	fs := f.Shape()
	xv, _ := b.Download(x)
	if fs != (backend.Shape{N: 2, H: 2, W: 2, C: 6}) || at(fv, fs, 1, 1, 0, 4) != at(xv, s, 3, 1, 0, 1) {
		t.Errorf("fold: shape %v", fs)
	}
	u, err := b.UnfoldFrames(f, 2)
	if uv := get(t, b, u, err); !slices.Equal(uv, xv) {
		t.Error("unfold(fold(x)) != x")
	}
	// ConcatPrev: frame 0 pairs with prev, frame t with t-1.
	prev, _ := b.Frames(x, 3, 1)
	c, err := b.ConcatPrev(x, prev)
	cv := get(t, b, c, err)
	cs := c.Shape()
	if at(cv, cs, 0, 1, 1, 4) != at(xv, s, 3, 1, 1, 1) || at(cv, cs, 2, 0, 1, 5) != at(xv, s, 1, 0, 1, 2) || at(cv, cs, 2, 0, 1, 2) != at(xv, s, 2, 0, 1, 2) {
		t.Error("concat prev misplaced values")
	}
	z, err := b.ConcatPrev(x, nil)
	if zv := get(t, b, z, err); at(zv, cs, 0, 0, 0, 3) != 0 {
		t.Error("concat prev without state is not zero")
	}
	// Unshuffle inverts shuffle.
	img, _ := b.Upload(backend.Shape{N: 1, H: 4, W: 6, C: 3}, seq(72))
	us, err := b.PixelUnshuffle(img, 2)
	if err != nil {
		t.Fatal(err)
	}
	back, err := b.PixelShuffle(us, 2, backend.ShuffleCRD)
	iv, _ := b.Download(img)
	if bv := get(t, b, back, err); !slices.Equal(bv, iv) {
		t.Error("shuffle(unshuffle(x)) != x")
	}
	// CropPad keeps the corner and zero-fills.
	cp, err := b.CropPad(img, 5, 2)
	cpv := get(t, b, cp, err)
	if cp.Shape() != (backend.Shape{N: 1, H: 5, W: 2, C: 3}) || cpv[3] != iv[3] || cpv[(4*2+1)*3] != 0 {
		t.Error("crop/pad")
	}
	// Frames + ConcatFrames.
	a, _ := b.Frames(x, 0, 1)
	rest, _ := b.Frames(x, 1, 3)
	all, err := b.ConcatFrames(a, rest)
	if av := get(t, b, all, err); !slices.Equal(av, xv) {
		t.Error("concat of frame slices != x")
	}
	if _, err := b.Frames(x, 3, 2); err == nil {
		t.Error("frames past the end accepted")
	}
}

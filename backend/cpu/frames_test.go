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

// TestUNetOps checks Pad against PyTorch's F.pad written out for one row
// (reflect: [1 2 3 4] padded by 2 and 1 is [3 2 1 2 3 4 3]; negative pads
// crop), ChannelMean and ScaleChannels against sums by hand, and the
// refusals.
func TestUNetOps(t *testing.T) {
	b := New(2)
	row := backend.Shape{N: 1, H: 1, W: 4, C: 1}
	r, _ := b.Upload(row, []float32{1, 2, 3, 4})
	for _, c := range []struct {
		left, right int
		mode        backend.PadMode
		want        []float32
	}{
		{2, 1, backend.PadReflect, []float32{3, 2, 1, 2, 3, 4, 3}},
		{3, 3, backend.PadReflect, []float32{4, 3, 2, 1, 2, 3, 4, 3, 2, 1}},
		{2, 1, backend.PadZero, []float32{0, 0, 1, 2, 3, 4, 0}},
		{-1, -2, backend.PadZero, []float32{2}},
		{-1, 2, backend.PadReflect, []float32{2, 3, 4, 3, 2}},
		{1, -1, backend.PadReflect, []float32{2, 1, 2, 3}},
	} {
		y, err := b.Pad(r, 0, 0, c.left, c.right, c.mode)
		if got := get(t, b, y, err); !slices.Equal(got, c.want) {
			t.Errorf("pad %d/%d mode %d: %v, want %v", c.left, c.right, c.mode, got, c.want)
		}
	}
	for _, bad := range [][4]int{{0, 0, 4, 0}, {0, 0, -2, -2}, {1, 0, 0, 0}} {
		if _, err := b.Pad(r, bad[0], bad[1], bad[2], bad[3], backend.PadReflect); err == nil {
			t.Errorf("reflection pad %v of a 4x1 row accepted", bad)
		}
	}
	// A 2-frame, 3x2, 2-channel tensor: rows and columns both move.
	s := backend.Shape{N: 2, H: 3, W: 2, C: 2}
	x, _ := b.Upload(s, seq(s.Elems()))
	xv, _ := b.Download(x)
	at := func(n, y, x, c int) float32 { return xv[((n*s.H+y)*s.W+x)*s.C+c] }
	// Top 1 (reflected), bottom -1 (row 2 cropped), left 1: rows 1 0 1
	// and columns 1 0 1 of each frame.
	p, err := b.Pad(x, 1, -1, 1, 0, backend.PadReflect)
	pv := get(t, b, p, err)
	if p.Shape() != (backend.Shape{N: 2, H: 3, W: 3, C: 2}) {
		t.Fatalf("pad shape %v", p.Shape())
	}
	var want []float32
	for n := range 2 {
		for _, y := range []int{1, 0, 1} {
			for _, x := range []int{1, 0, 1} {
				want = append(want, at(n, y, x, 0), at(n, y, x, 1))
			}
		}
	}
	if !slices.Equal(pv, want) {
		t.Errorf("2-D reflection pad %v, want %v", pv, want)
	}
	m, err := b.ChannelMean(x)
	mv := get(t, b, m, err)
	if m.Shape() != (backend.Shape{N: 2, H: 1, W: 1, C: 2}) || !slices.Equal(mv, []float32{6, 7, 18, 19}) {
		t.Errorf("channel mean %v %v, want [6 7 18 19]", m.Shape(), mv)
	}
	g, err := b.ScaleChannels(x, m)
	gv := get(t, b, g, err)
	if gv[0] != 1*6 || gv[1] != 2*7 || gv[12] != 13*18 || gv[23] != 24*19 {
		t.Errorf("scale channels %v", gv)
	}
	if _, err := b.ScaleChannels(m, x); err == nil {
		t.Error("scale channels with factors of the wrong shape accepted")
	}
}

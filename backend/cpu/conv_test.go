package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// TestConv2DAdd checks the residual convolution against Conv2D, Binary
// and Activate, exactly.
func TestConv2DAdd(t *testing.T) {
	b := New(2)
	r := rand.New(rand.NewPCG(1, 2))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return v
	}
	s := backend.Shape{N: 2, H: 7, W: 9, C: 5}
	ys := backend.Shape{N: 2, H: 7, W: 9, C: 6}
	x, _ := b.Upload(s, vals(s.Elems()))
	res, _ := b.Upload(ys, vals(ys.Elems()))
	w, err := b.PrepareConv(6, 5, 3, 3, vals(6*5*9), vals(6))
	if err != nil {
		t.Fatal(err)
	}
	p := backend.ConvParams{KH: 3, KW: 3, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1, PadT: 1, PadL: 1, PadB: 1, PadR: 1}
	relu := backend.Activation{Kind: backend.ActReLU}
	got, err := b.Conv2DAdd(x, w, p, relu, res)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := b.Conv2D(x, w, p, backend.Activation{})
	sum, _ := b.Binary(backend.OpAdd, c, res)
	want, _ := b.Activate(sum, relu)
	g, _ := b.Download(got)
	wv, _ := b.Download(want)
	for i := range wv {
		if g[i] != wv[i] {
			t.Fatalf("value %d: %v, separate ops %v", i, g[i], wv[i])
		}
	}
	if _, err := b.Conv2DAdd(x, w, p, relu, x); err == nil {
		t.Error("a residual of the wrong shape was accepted")
	}
}

// TestSliceConv checks a convolution of a channel prefix into a channel
// slice, in place and into another tensor, against Channels, Conv2D and
// CopyChannels exactly, and that it refuses overlapping channels, too few
// input channels, a slice past the end and a kernel that changes the
// frame size.
func TestSliceConv(t *testing.T) {
	b := New(2)
	r := rand.New(rand.NewPCG(3, 4))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return v
	}
	s := backend.Shape{N: 2, H: 6, W: 7, C: 20}
	xv := vals(s.Elems())
	w, err := b.PrepareConv(4, 12, 3, 3, vals(4*12*9), vals(4))
	if err != nil {
		t.Fatal(err)
	}
	p := backend.ConvParams{KH: 3, KW: 3, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1, PadT: 1, PadL: 1, PadB: 1, PadR: 1}
	act := backend.Activation{Kind: backend.ActLeaky, Alpha: 0.2}

	// The same through copies: the prefix, the convolution, the slice.
	want, _ := b.Upload(s, xv)
	prefix, _ := b.Channels(want, 0, 12)
	part, err := b.Conv2D(prefix, w, p, act)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CopyChannels(want, 14, part); err != nil {
		t.Fatal(err)
	}
	got, _ := b.Upload(s, xv)
	if err := b.SliceConv(got, w, p, act, got, 14); err != nil {
		t.Fatal(err)
	}
	wv, _ := b.Download(want)
	gv, _ := b.Download(got)
	for i := range wv {
		if wv[i] != gv[i] {
			t.Fatalf("in place: value %d is %v, want %v", i, gv[i], wv[i])
		}
	}
	y, _ := b.Upload(backend.Shape{N: 2, H: 6, W: 7, C: 4}, make([]float32, 2*6*7*4))
	if err := b.SliceConv(got, w, p, act, y, 0); err != nil {
		t.Fatal(err)
	}
	pv, _ := b.Download(part)
	yv, _ := b.Download(y)
	for i := range pv {
		if pv[i] != yv[i] {
			t.Fatalf("into another tensor: value %d is %v, want %v", i, yv[i], pv[i])
		}
	}

	narrow, _ := b.Upload(backend.Shape{N: 2, H: 6, W: 7, C: 8}, make([]float32, 2*6*7*8))
	valid := backend.ConvParams{KH: 3, KW: 3, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1}
	for _, c := range []struct {
		name string
		x, y backend.Tensor
		p    backend.ConvParams
		at   int
	}{
		{"overlapping channels", got, got, p, 8},
		{"too few input channels", narrow, got, p, 14},
		{"a slice past the end", got, got, p, 17},
		{"a kernel that shrinks the frame", got, got, valid, 14},
	} {
		if err := b.SliceConv(c.x, w, c.p, act, c.y, c.at); err == nil {
			t.Errorf("%s: accepted", c.name)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
}

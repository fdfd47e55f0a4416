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

package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// TestActivatePointwise checks the weightless activations SPAN's graph
// uses against their definitions, computed in float64.
func TestActivatePointwise(t *testing.T) {
	b := New(1)
	in := []float32{-20, -3, -0.5, 0, 0.25, 1, 4, 30}
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	cases := []struct {
		act  backend.Activation
		want func(float64) float64
	}{
		{backend.Activation{Kind: backend.ActSiLU}, func(v float64) float64 { return v * sig(v) }},
		{backend.Activation{Kind: backend.ActSigmoid}, sig},
		{backend.Activation{Kind: backend.ActAddScalar, Alpha: -0.5}, func(v float64) float64 { return v - 0.5 }},
		{backend.Activation{Kind: backend.ActMulScalar, Alpha: 255}, func(v float64) float64 { return v * 255 }},
	}
	for _, c := range cases {
		x, err := b.Upload(backend.Shape{N: 1, H: 1, W: 2, C: len(in) / 2}, in)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.Activate(x, c.act)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Download(y)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range in {
			want := c.want(float64(v))
			if math.Abs(float64(got[i])-want) > 1e-7*math.Max(1, math.Abs(want)) {
				t.Errorf("activation %d of %g: %g, want %g", c.act.Kind, v, got[i], want)
			}
		}
		x.Free()
		y.Free()
	}
}

// TestActivateUnknown refuses an activation kind backend.ActKind does not
// list rather than passing its input through.
func TestActivateUnknown(t *testing.T) {
	b := New(1)
	x, err := b.Upload(backend.Shape{N: 1, H: 1, W: 1, C: 1}, []float32{1})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	if _, err := b.Activate(x, backend.Activation{Kind: backend.ActMish + 1}); err == nil || !strings.Contains(err.Error(), "unknown activation") {
		t.Errorf("Activate of an unknown kind: %v", err)
	}
}

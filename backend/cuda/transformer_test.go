package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// TestTransformerOps compares the GPU's Linear (plain, with GELU, and
// accumulating), LayerNorm, RMSNorm and RMSNorm+RoPE with the CPU backend.
func TestTransformerOps(t *testing.T) {
	const rows, in, out = 300, 256, 384
	r := rand.New(rand.NewPCG(3, 4))
	x := randSlice(r, rows*in, -1, 1)
	w := randSlice(r, out*in, -0.2, 0.2)
	bias := randSlice(r, out, -1, 1)
	acc := randSlice(r, rows*out, -1, 1)
	norm := randSlice(r, in, 0.5, 1.5)
	rope := &backend.RoPE{Grid: backend.Grid{F: 3, H: 10, W: 10}, Offset: 7, HeadDim: 128}
	tr := func(b backend.Backend) backend.Transformer { return b.(backend.Transformer) }
	up := func(b backend.Backend, rows, cols int, v []float32) backend.Tensor {
		tt, err := b.Upload(backend.Matrix(rows, cols), v)
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	for _, dt := range []DType{BF16, F16} {
		for _, act := range []backend.ActKind{backend.ActNone, backend.ActGELUTanh} {
			both(t, dt, "linear", func(b backend.Backend) (backend.Tensor, error) {
				lw, err := tr(b).PrepareLinear(out, in, w, bias)
				if err != nil {
					return nil, err
				}
				return tr(b).Linear(up(b, rows, in, x), lw, act, nil)
			})
		}
		both(t, dt, "linear+acc", func(b backend.Backend) (backend.Tensor, error) {
			lw, err := tr(b).PrepareLinear(out, in, w, nil)
			if err != nil {
				return nil, err
			}
			return tr(b).Linear(up(b, rows, in, x), lw, backend.ActNone, up(b, rows, out, acc))
		})
		both(t, dt, "layernorm", func(b backend.Backend) (backend.Tensor, error) {
			return tr(b).LayerNorm(up(b, rows, in, x), 1e-6)
		})
		for _, rp := range []*backend.RoPE{nil, rope} {
			both(t, dt, "rmsnorm+rope", func(b backend.Backend) (backend.Tensor, error) {
				xt := up(b, rows, in, x)
				return xt, tr(b).RMSNormRoPE(xt, up(b, 1, in, norm), 1e-6, rp)
			})
		}
		both(t, dt, "reshape", func(b backend.Backend) (backend.Tensor, error) {
			return tr(b).Reshape(up(b, rows, in, x), backend.Shape{N: 3, H: 10, W: 10, C: in})
		})
	}
}

// TestLinearGELUTanh checks that the GEMM's GELU epilogue is the tanh
// approximation the DiT needs: at -3 it differs from the exact GELU by 11%.
func TestLinearGELUTanh(t *testing.T) {
	g := open(t, BF16)
	const in = 16
	xs := []float32{-3, -2.5, -2, -1, 0.5, 2}
	x := make([]float32, len(xs)*in)
	for i, v := range xs {
		x[i*in] = v
	}
	const out = 8
	w := make([]float32, out*in) // output 0 is input 0
	w[0] = 1
	lw, err := g.PrepareLinear(out, in, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	xt, _ := g.Upload(backend.Matrix(len(xs), in), x)
	y, err := g.Linear(xt, lw, backend.ActGELUTanh, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := g.Download(y)
	for i, v := range xs {
		x := float64(v)
		want := 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		if d := math.Abs(float64(got[i*out]) - want); d > 0.01*math.Abs(want)+1e-5 {
			t.Errorf("gelu(%g) = %g, tanh approximation %g", x, got[i*out], want)
		}
	}
}

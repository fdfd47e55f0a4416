package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// TestTransformerOps compares the GPU's Linear (plain, with GELU, and
// accumulating), LayerNorm, RMSNorm, RMSNorm+RoPE and AttentionWeights
// with the CPU backend.
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
		// Accumulating into a view of rows 100..249 changes those rows of
		// the whole matrix and no others.
		both(t, dt, "linear+acc into rows", func(b backend.Backend) (backend.Tensor, error) {
			lw, err := tr(b).PrepareLinear(out, in, w, bias)
			if err != nil {
				return nil, err
			}
			whole := up(b, rows, out, acc)
			xr, err := tr(b).Rows(up(b, rows, in, x), 50, 150)
			if err != nil {
				return nil, err
			}
			view, err := tr(b).Rows(whole, 100, 150)
			if err != nil {
				return nil, err
			}
			_, err = tr(b).Linear(xr, lw, backend.ActNone, view)
			return whole, err
		})
		both(t, dt, "layernorm", func(b backend.Backend) (backend.Tensor, error) {
			return tr(b).LayerNorm(up(b, rows, in, x), 1e-6)
		})
		// Rows that are not a multiple of 8 wide take the scalar kernels.
		norm260 := randSlice(r, 260, 0.5, 1.5)
		both(t, dt, "layernorm, 260 columns", func(b backend.Backend) (backend.Tensor, error) {
			return tr(b).LayerNorm(up(b, 200, 260, x[:200*260]), 1e-6)
		})
		both(t, dt, "rmsnorm, 260 columns", func(b backend.Backend) (backend.Tensor, error) {
			xt := up(b, 200, 260, x[:200*260])
			return xt, tr(b).RMSNormRoPE(xt, up(b, 1, 260, norm260), 1e-6, nil)
		})
		both(t, dt, "rmsnorm+rope, 36 columns", func(b backend.Backend) (backend.Tensor, error) {
			xt := up(b, 30, 36, x[:30*36])
			rp := &backend.RoPE{Grid: backend.Grid{F: 2, H: 3, W: 5}, Offset: 4, HeadDim: 12}
			return xt, tr(b).RMSNormRoPE(xt, up(b, 1, 36, norm260[:36]), 1e-6, rp)
		})
		// A slice of the tokens from token 7 on, its last 4 rows padding.
		both(t, dt, "rmsnorm+rope from a first token", func(b backend.Backend) (backend.Tensor, error) {
			xt := up(b, 27, 36, x[:27*36])
			rp := &backend.RoPE{Grid: backend.Grid{F: 2, H: 3, W: 5}, Offset: 4, HeadDim: 12, First: 7}
			return xt, tr(b).RMSNormRoPE(xt, up(b, 1, 36, norm260[:36]), 1e-6, rp)
		})
		for _, rp := range []*backend.RoPE{nil, rope} {
			both(t, dt, "rmsnorm+rope", func(b backend.Backend) (backend.Tensor, error) {
				xt := up(b, rows, in, x)
				return xt, tr(b).RMSNormRoPE(xt, up(b, 1, in, norm), 1e-6, rp)
			})
		}
		// Attention weights over 3 keys (one left out by -Inf) in heads of
		// 128, 8 keys in heads of 32 and 16 keys in heads of 64, by the
		// vectorised kernel where it applies and by the scalar one.
		for _, c := range []struct{ n, hd int }{{3, 128}, {8, 32}, {16, 64}} {
			kv := randSlice(r, c.n*in, -0.3, 0.3)
			kb := randSlice(r, c.n, -1, 2)
			if c.n == 3 {
				kb[1] = float32(math.Inf(-1))
			}
			for _, scalar := range []bool{false, true} {
				both(t, dt, "attention weights", func(b backend.Backend) (backend.Tensor, error) {
					if g, ok := b.(*Backend); ok {
						g.scalarRows = scalar
					}
					kw, err := tr(b).PrepareKeys(c.n, in, kv, kb)
					if err != nil {
						return nil, err
					}
					return tr(b).AttentionWeights(up(b, rows, in, x), kw, c.hd, 1e-6)
				})
			}
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

// BenchmarkDiTOps times each op of a SwiftVR DiT block on a middle chunk
// (21600 tokens, width 3072, FFN 14336, bf16), GEMMs in TFLOP/s and row
// kernels in GB/s of traffic, and the FFN in pieces of rows (as
// swiftvr.DiT.FFNRows runs it) against one pass.
func BenchmarkDiTOps(bb *testing.B) {
	const rows, dim, ffn = 21600, 3072, 14336
	b := open(bb, BF16)
	r := rand.New(rand.NewPCG(5, 6))
	up := func(rows, cols int, lo, hi float32) backend.Tensor {
		t, err := b.Upload(backend.Matrix(rows, cols), randSlice(r, rows*cols, lo, hi))
		if err != nil {
			bb.Fatal(err)
		}
		return t
	}
	linear := func(out, in int) backend.Weights {
		w, err := b.PrepareLinear(out, in, randSlice(r, out*in, -0.02, 0.02), randSlice(r, out, -0.1, 0.1))
		if err != nil {
			bb.Fatal(err)
		}
		return w
	}
	x, hid, mid := up(rows, dim, -1, 1), up(rows, dim, -1, 1), up(rows, ffn, -1, 1)
	wqkv, wff1, wff2 := linear(dim, dim), linear(ffn, dim), linear(dim, ffn)
	norm := up(1, dim, 0.5, 1.5)
	rope := &backend.RoPE{Grid: backend.Grid{F: 6, H: 45, W: 80}, Offset: 7, HeadDim: 128}
	check := func(t backend.Tensor, err error) {
		if err != nil {
			bb.Fatal(err)
		}
		if t != nil && t != hid && t != x {
			t.Free()
		}
	}
	ffnPieces := func(n int) func() {
		return func() {
			for s := 0; s < rows; s += n {
				xr, err := b.Rows(x, s, min(n, rows-s))
				check(nil, err)
				hr, err := b.Rows(hid, s, min(n, rows-s))
				check(nil, err)
				f, err := b.Linear(xr, wff1, backend.ActGELUTanh, nil)
				check(nil, err)
				check(b.Linear(f, wff2, backend.ActNone, hr))
				f.Free()
				xr.Free()
				hr.Free()
			}
		}
	}
	// Cross-attention after the query projection: over 512 prompt rows
	// (RMSNorm, attention, output projection), and merged over n distinct
	// rows (weights, then the values folded into a projection of 24n inputs).
	kp, vp, wo := up(512, dim, -1, 1), up(512, dim, -1, 1), linear(dim, dim)
	crossFull := func() {
		check(nil, b.RMSNormRoPE(x, norm, 1e-6, nil))
		a, err := b.Attention(x, kp, vp, 128)
		check(nil, err)
		check(b.Linear(a, wo, backend.ActNone, hid))
		a.Free()
	}
	crossMerged := func(n int) func() {
		kw, err := b.PrepareKeys(n, dim, randSlice(r, n*dim, -0.1, 0.1), randSlice(r, n, 0, 6))
		check(nil, err)
		u := linear(dim, 24*n)
		return func() {
			p, err := b.AttentionWeights(x, kw, 128, 1e-6)
			check(nil, err)
			check(b.Linear(p, u, backend.ActNone, hid))
			p.Free()
		}
	}
	crossMerged2 := crossMerged(2)
	kw2, err := b.PrepareKeys(2, dim, randSlice(r, 2*dim, -0.1, 0.1), []float32{0, 6})
	check(nil, err)
	gemm := 2.0 * rows * dim
	for _, name := range []string{"layer_norm_vec", "rms_norm_rope_vec", "attention_weights_vec"} {
		if f, err := b.kernel(transformerSource, name+"_bf16"); err == nil {
			bb.Logf("%s: %s", name, fnInfo(f))
		}
	}
	for _, c := range []struct {
		name  string
		tflop float64 // else GB of traffic
		gb    float64
		run   func()
	}{
		{name: "linear-3072", tflop: gemm * dim, run: func() { check(b.Linear(x, wqkv, backend.ActNone, nil)) }},
		{name: "linear-3072-acc", tflop: gemm * dim, run: func() { check(b.Linear(x, wqkv, backend.ActNone, hid)) }},
		{name: "ffn1-gelu", tflop: gemm * ffn, run: func() { check(b.Linear(x, wff1, backend.ActGELUTanh, nil)) }},
		{name: "ffn2-acc", tflop: gemm * ffn, run: func() { check(b.Linear(mid, wff2, backend.ActNone, hid)) }},
		{name: "ffn-1-piece", tflop: 2 * gemm * ffn, run: ffnPieces(rows)},
		{name: "ffn-3-pieces", tflop: 2 * gemm * ffn, run: ffnPieces(7232)},
		{name: "layernorm", gb: 4.0 * rows * dim, run: func() { check(b.LayerNorm(x, 1e-6)) }},
		{name: "rmsnorm-rope", gb: 4.0 * rows * dim, run: func() { check(nil, b.RMSNormRoPE(x, norm, 1e-6, rope)) }},
		{name: "cross-512-rows", tflop: gemm * (dim + 2*512), run: crossFull},
		{name: "cross-merged-2-rows", gb: 6.0 * rows * dim, run: crossMerged2},
		{name: "cross-merged-2-rows-scalar", gb: 6.0 * rows * dim, run: func() {
			b.scalarRows = true
			defer func() { b.scalarRows = false }()
			crossMerged2()
		}},
		{name: "attention-weights-2-rows", gb: 2.0 * rows * dim, run: func() { check(b.AttentionWeights(x, kw2, 128, 1e-6)) }},
		{name: "cross-merged-32-rows", gb: 6.0 * rows * dim, run: crossMerged(32)},
	} {
		bb.Run(c.name, func(bb *testing.B) {
			if s := perOp(bb, b, c.run); c.tflop > 0 {
				bb.ReportMetric(c.tflop/s/1e12, "TFLOP/s")
			} else {
				bb.ReportMetric(c.gb/s/1e9, "GB/s")
			}
		})
	}
}

package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// TestFP8Linear compares fp8 Linear with float64 on the host: inputs whose
// rows and weights whose output channels spread over 10^±2 in magnitude
// (as trained transformers' outlier channels do), so that a scale per row
// and per channel is needed (one scale per tensor would leave the small
// rows and channels in e4m3's subnormals). Each row and each column of
// the output must be within e4m3's error; plain, with GELU, accumulating,
// and from LayerNormFP8 through a Rows view.
func TestFP8Linear(t *testing.T) {
	g := open(t, BF16)
	if err := g.fp8Check(); err != nil {
		t.Skip(err)
	}
	const rows, in, out = 300, 256, 384
	r := rand.New(rand.NewPCG(5, 6))
	spread := func(n, cols int, k float64) []float32 {
		v := make([]float32, n*cols)
		for i := 0; i < n; i++ {
			mag := math.Pow(10, (r.Float64()*2-1)*k)
			for j := 0; j < cols; j++ {
				v[i*cols+j] = float32(r.NormFloat64() * mag)
			}
		}
		return v
	}
	x, w := spread(rows, in, 2), spread(out, in, 2)
	bias := randSlice(r, out, -0.01, 0.01)
	acc := randSlice(r, rows*out, -0.01, 0.01)
	up := func(rows, cols int, v []float32) backend.Tensor {
		tt, err := g.Upload(backend.Matrix(rows, cols), v)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tt.Free)
		return tt
	}
	lw, err := g.PrepareLinearFP8(out, in, w, bias)
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Free()
	// want computes act(xs·Wᵀ + b) (+ acc) in float64.
	want := func(xs []float32, n int, act backend.ActKind, acc []float32) []float32 {
		y := make([]float32, n*out)
		for i := 0; i < n; i++ {
			for o := 0; o < out; o++ {
				s := float64(bias[o])
				for k := 0; k < in; k++ {
					s += float64(xs[i*in+k]) * float64(w[o*in+k])
				}
				if act == backend.ActGELUTanh {
					s = 0.5 * s * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(s+0.044715*s*s*s)))
				}
				if acc != nil {
					s += float64(acc[i*out+o])
				}
				y[i*out+o] = float32(s)
			}
		}
		return y
	}
	// layerNorm is the rows' LayerNorm in float64.
	layerNorm := func(xs []float32) []float32 {
		y := make([]float32, len(xs))
		for i := 0; i < len(xs)/in; i++ {
			row := xs[i*in : (i+1)*in]
			var m, v float64
			for _, a := range row {
				m += float64(a)
			}
			m /= in
			for _, a := range row {
				v += (float64(a) - m) * (float64(a) - m)
			}
			rs := 1 / math.Sqrt(v/in+1e-6)
			for j, a := range row {
				y[i*in+j] = float32((float64(a) - m) * rs)
			}
		}
		return y
	}
	check := func(name string, got backend.Tensor, want []float32, n int, bound float64) {
		t.Helper()
		gv, err := g.Download(got)
		if err != nil {
			t.Fatal(err)
		}
		worstRow, worstCol := 0.0, 0.0
		for i := 0; i < n; i++ {
			worstRow = math.Max(worstRow, relErr(gv[i*out:(i+1)*out], want[i*out:(i+1)*out]))
		}
		for o := 0; o < out; o++ {
			gc, wc := make([]float32, n), make([]float32, n)
			for i := 0; i < n; i++ {
				gc[i], wc[i] = gv[i*out+o], want[i*out+o]
			}
			worstCol = math.Max(worstCol, relErr(gc, wc))
		}
		t.Logf("%s: whole %.4f, worst row %.4f, worst column %.4f (relative)", name, relErr(gv, want), worstRow, worstCol)
		if worstRow > bound || worstCol > bound {
			t.Errorf("%s: worst row %.4f, column %.4f, want < %g", name, worstRow, worstCol, bound)
		}
	}
	for _, act := range []backend.ActKind{backend.ActNone, backend.ActGELUTanh} {
		y, err := g.Linear(up(rows, in, x), lw, act, nil)
		if err != nil {
			t.Fatal(err)
		}
		// e4m3 keeps 3 mantissa bits: about 3% rms on each of x and W; GELU
		// takes columns of mostly negative inputs near 0, where the same
		// absolute error is a larger part.
		name, bound := "linear", 0.08
		if act == backend.ActGELUTanh {
			name, bound = "linear+gelu", 0.15
		}
		check(name, y, want(x, rows, act, nil), rows, bound)
		y.Free()
	}
	a := up(rows, out, acc)
	if _, err := g.Linear(up(rows, in, x), lw, backend.ActNone, a); err != nil {
		t.Fatal(err)
	}
	check("linear+acc", a, want(x, rows, backend.ActNone, acc), rows, 0.08)

	// LayerNormFP8, rows 64..191 of it.
	q, err := g.LayerNormFP8(up(rows, in, x), 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Free()
	view, err := g.Rows(q, 64, 128)
	if err != nil {
		t.Fatal(err)
	}
	y, err := g.Linear(view, lw, backend.ActNone, nil)
	view.Free()
	if err != nil {
		t.Fatal(err)
	}
	check("layernorm8 rows 64..191", y, want(layerNorm(x)[64*in:192*in], 128, backend.ActNone, nil), 128, 0.08)
	y.Free()

	// An fp8 tensor is refused by every op but Linear and Rows.
	if _, err := g.LayerNorm(q, 1e-6); err == nil {
		t.Error("LayerNorm took an fp8 tensor")
	}
	if _, err := g.Linear(q, lw, backend.ActGELUTanh, up(rows, out, acc)); err == nil {
		t.Error("GELU with accumulation was accepted")
	}
}

// TestFP8Refused: fp8 needs bf16 storage.
func TestFP8Refused(t *testing.T) {
	g := open(t, F16)
	_, err := g.PrepareLinearFP8(16, 16, make([]float32, 256), nil)
	if err == nil || !strings.Contains(err.Error(), "bf16") {
		t.Fatalf("fp8 on f16 storage: %v", err)
	}
}

// TestFP8LinearDiTShapes runs the DiT's linear layers at their real shapes
// for a middle chunk (21,600 tokens; 3072 -> 3072, 3072 -> 14336 with GELU,
// 14336 -> 3072) in fp8 and in bf16, and compares both with float64 on 64
// of the rows: the error e4m3 adds per GEMM, beside bf16's.
func TestFP8LinearDiTShapes(t *testing.T) {
	g := open(t, BF16)
	if err := g.fp8Check(); err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("short")
	}
	const rows, sample = 21600, 64
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		name    string
		in, out int
		act     backend.ActKind
	}{{"qkvo", 3072, 3072, backend.ActNone}, {"ff1", 3072, 14336, backend.ActGELUTanh}, {"ff2", 14336, 3072, backend.ActNone}} {
		x := make([]float32, rows*c.in)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		lim := float32(1 / math.Sqrt(float64(c.in)))
		w, bias := randSlice(r, c.out*c.in, -lim, lim), randSlice(r, c.out, -0.1, 0.1)
		xt, err := g.Upload(backend.Matrix(rows, c.in), x)
		if err != nil {
			t.Fatal(err)
		}
		run := func(prep func(out, in int, w, bias []float32) (backend.Weights, error)) []float32 {
			lw, err := prep(c.out, c.in, w, bias)
			if err != nil {
				t.Fatal(err)
			}
			defer lw.Free()
			y, err := g.Linear(xt, lw, c.act, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer y.Free()
			v, err := g.Download(y)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		y8, y16 := run(g.PrepareLinearFP8), run(g.PrepareLinear)
		xt.Free()
		var got8, got16, want []float32
		for k := 0; k < sample; k++ {
			i := k * (rows / sample)
			for o := 0; o < c.out; o++ {
				s := float64(bias[o])
				for j := 0; j < c.in; j++ {
					s += float64(x[i*c.in+j]) * float64(w[o*c.in+j])
				}
				if c.act == backend.ActGELUTanh {
					s = 0.5 * s * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(s+0.044715*s*s*s)))
				}
				want = append(want, float32(s))
				got8, got16 = append(got8, y8[i*c.out+o]), append(got16, y16[i*c.out+o])
			}
		}
		e8, e16 := relErr(got8, want), relErr(got16, want)
		t.Logf("%s %dx%d -> %d: relative error against float64: fp8 %.4f, bf16 %.4f; fp8 against bf16 %.4f",
			c.name, rows, c.in, c.out, e8, e16, relErr(got8, got16))
		if e8 > 0.06 || math.IsNaN(e8) {
			t.Errorf("%s: fp8 relative error %.4f, want < 0.06", c.name, e8)
		}
	}
}

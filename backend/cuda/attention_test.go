package cuda

// GPU tests of attention.cu against a float64 host reference (they skip
// without a GPU), and benchmarks at the SwiftVR DiT's shapes.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model/swiftvr"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/tensor/half"
)

// attnBound is the accepted ||out-ref|| / ||ref|| for a storage type.
func attnBound(dt DType) float64 {
	if dt == BF16 {
		return 1e-2
	}
	return 2e-3
}

// attnData returns n values ~ N(0, scale²), rounded to the storage type
// (so that the reference sees what the kernel sees).
func attnData(r *rand.Rand, dt DType, n int, scale float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		x := float32(r.NormFloat64() * scale)
		if dt == BF16 {
			s[i] = half.FromBF16(half.ToBF16(x))
		} else {
			s[i] = half.FromF16(half.ToF16(x))
		}
	}
	return s
}

// attnRef sets out's rows qrows (all heads) to the attention of those rows
// of q over the rows krows of k and v, in float64.
func attnRef(q, k, v []float32, cols, d int, qrows, krows []int, out []float64) {
	sc := 1 / math.Sqrt(float64(d))
	p := make([]float64, len(krows))
	for h := 0; h < cols; h += d {
		for _, i := range qrows {
			qi := q[i*cols+h : i*cols+h+d]
			mx := math.Inf(-1)
			for j, kr := range krows {
				kj := k[kr*cols+h : kr*cols+h+d]
				s := 0.0
				for c := range qi {
					s += float64(qi[c]) * float64(kj[c])
				}
				p[j] = s * sc
				mx = max(mx, p[j])
			}
			sum := 0.0
			for j := range p {
				p[j] = math.Exp(p[j] - mx)
				sum += p[j]
			}
			o := out[i*cols+h : i*cols+h+d]
			clear(o)
			for j, kr := range krows {
				w := p[j] / sum
				for c, x := range v[kr*cols+h : kr*cols+h+d] {
					o[c] += w * float64(x)
				}
			}
		}
	}
}

// attnUpload uploads a rows x cols matrix.
func attnUpload(t testing.TB, b *Backend, rows, cols int, data []float32) backend.Tensor {
	t.Helper()
	x, err := b.Upload(backend.Matrix(rows, cols), data)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// attnPoison leaves a NaN-filled block of a rows x cols matrix at the top
// of the pool, where the next op's result is allocated: rows the kernel
// fails to write stay NaN.
func attnPoison(t testing.TB, b *Backend, rows, cols int) {
	t.Helper()
	nan := make([]float32, rows*cols)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	attnUpload(t, b, rows, cols, nan).Free()
}

// attnCheck compares out with ref row by row.
func attnCheck(t *testing.T, name string, dt DType, out []float32, ref []float64, cols int) {
	t.Helper()
	var num, den float64
	bad := 0
	for r := 0; r < len(ref)/cols; r++ {
		ok := true
		for c := r * cols; c < (r+1)*cols; c++ {
			d := float64(out[c]) - ref[c]
			if math.IsNaN(d) || math.IsInf(d, 0) {
				ok = false
				continue
			}
			num += d * d
			den += ref[c] * ref[c]
		}
		if !ok {
			bad++
		}
	}
	e := math.Sqrt(num / den)
	if bad > 0 || !(e < attnBound(dt)) {
		t.Errorf("%s %v: %d rows not finite (unwritten?), relative error %.3g (bound %.3g)", name, dt, bad, e, attnBound(dt))
	} else {
		t.Logf("%s %v: relative error %.3g", name, dt, e)
	}
}

// attnLogKernel logs the registers and local memory of a kernel.
func attnLogKernel(t *testing.T, b *Backend, name string) {
	f, err := b.kernel(attnDefault.src, name)
	if err != nil {
		t.Fatal(err)
	}
	regs, _ := f.Attribute(cu.FuncNumRegs)
	local, _ := f.Attribute(cu.FuncAttribute(3)) // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
	t.Logf("%s: %d registers, %d bytes of local memory", name, regs, local)
}

func TestAttention(t *testing.T) {
	for _, dt := range []DType{BF16, F16} {
		b := open(t, dt)
		for _, c := range []struct{ lq, lk, heads, d int }{
			{1000, 512, 2, 128}, {1000, 37, 2, 128}, {130, 1, 2, 128}, {200, 100, 3, 64},
		} {
			r := rand.New(rand.NewPCG(uint64(c.lq), uint64(c.lk)))
			cols := c.heads * c.d
			// q.k has std 2 (entries of std 2^(1/2) each, over sqrt(d) terms).
			q := attnData(r, dt, c.lq*cols, math.Sqrt2)
			k := attnData(r, dt, c.lk*cols, math.Sqrt2)
			v := attnData(r, dt, c.lk*cols, 1)
			qt, kt, vt := attnUpload(t, b, c.lq, cols, q), attnUpload(t, b, c.lk, cols, k), attnUpload(t, b, c.lk, cols, v)
			attnPoison(t, b, c.lq, cols)
			y, err := b.Attention(qt, kt, vt, c.d)
			if err != nil {
				t.Fatal(err)
			}
			out, err := b.Download(y)
			if err != nil {
				t.Fatal(err)
			}
			ref := make([]float64, c.lq*cols)
			rows := func(n int) []int {
				s := make([]int, n)
				for i := range s {
					s[i] = i
				}
				return s
			}
			attnRef(q, k, v, cols, c.d, rows(c.lq), rows(c.lk), ref)
			attnCheck(t, fmt.Sprintf("attention %dx%d (%d heads of %d)", c.lq, c.lk, c.heads, c.d), dt, out, ref, cols)
			for _, x := range []backend.Tensor{qt, kt, vt, y} {
				x.Free()
			}
		}
		if dt == BF16 {
			attnLogKernel(t, b, "attention_d128_bf16")
		}
	}
}

// attnWindows returns SwiftVR's windows over g (shifted by half a window or
// not).
func attnWindows(g backend.Grid, shifted bool) backend.Windows {
	shift := 0
	if shifted {
		shift = swiftvr.Window / 2
	}
	ys, xs := swiftvr.WindowStarts(g.H, shift), swiftvr.WindowStarts(g.W, shift)
	return backend.Windows{Size: swiftvr.Window, YStarts: ys, XStarts: xs,
		YOwner: swiftvr.WindowOwners(g.H, ys, shifted), XOwner: swiftvr.WindowOwners(g.W, xs, shifted)}
}

// attnWindowRef is the reference of WindowAttention.
func attnWindowRef(q, k, v []float32, cols, d int, g backend.Grid, w backend.Windows) []float64 {
	out := make([]float64, g.Tokens()*cols)
	wh, ww := min(w.Size, g.H), min(w.Size, g.W)
	for i, ys := range w.YStarts {
		for j, xs := range w.XStarts {
			var qrows, krows []int
			for f := 0; f < g.F; f++ {
				for y := 0; y < g.H; y++ {
					for x := 0; x < g.W; x++ {
						row := (f*g.H+y)*g.W + x
						if w.YOwner[y] == i && w.XOwner[x] == j {
							qrows = append(qrows, row)
						}
						if y >= ys && y < ys+wh && x >= xs && x < xs+ww {
							krows = append(krows, row)
						}
					}
				}
			}
			attnRef(q, k, v, cols, d, qrows, krows, out)
		}
	}
	return out
}

func TestWindowAttention(t *testing.T) {
	for _, dt := range []DType{BF16, F16} {
		b := open(t, dt)
		for _, c := range []struct {
			g       backend.Grid
			shifted bool
		}{
			{backend.Grid{F: 2, H: 20, W: 36}, false},
			{backend.Grid{F: 2, H: 20, W: 36}, true},
			{backend.Grid{F: 2, H: 10, W: 36}, true},
			{backend.Grid{F: 3, H: 10, W: 7}, false},
		} {
			const heads, d = 2, 128
			cols := heads * d
			n := c.g.Tokens()
			w := attnWindows(c.g, c.shifted)
			r := rand.New(rand.NewPCG(uint64(n), 7))
			q := attnData(r, dt, n*cols, math.Sqrt2)
			k := attnData(r, dt, n*cols, math.Sqrt2)
			v := attnData(r, dt, n*cols, 1)
			qt, kt, vt := attnUpload(t, b, n, cols, q), attnUpload(t, b, n, cols, k), attnUpload(t, b, n, cols, v)
			attnPoison(t, b, n, cols)
			y, err := b.WindowAttention(qt, kt, vt, d, c.g, w)
			if err != nil {
				t.Fatal(err)
			}
			out, err := b.Download(y)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("window attention %+v shifted=%v (starts %v x %v)", c.g, c.shifted, w.YStarts, w.XStarts)
			attnCheck(t, name, dt, out, attnWindowRef(q, k, v, cols, d, c.g, w), cols)
			for _, x := range []backend.Tensor{qt, kt, vt, y} {
				x.Free()
			}
		}
	}
}

// attnBench times op on random rows x cols q, k and v (k and v of krows)
// and reports TFLOP/s for the given count, for the default kernel and
// the variants of attention.cu.
func attnBench(bb *testing.B, rows, krows, cols int, flops float64, op func(b *Backend, q, k, v backend.Tensor) (backend.Tensor, error)) {
	b := open(bb, BF16)
	r := rand.New(rand.NewPCG(1, 2))
	q := attnUpload(bb, b, rows, cols, attnData(r, BF16, rows*cols, math.Sqrt2))
	k := attnUpload(bb, b, krows, cols, attnData(r, BF16, krows*cols, math.Sqrt2))
	v := attnUpload(bb, b, krows, cols, attnData(r, BF16, krows*cols, 1))
	variant := func(name string, warps int, opts ...string) attnKernel {
		return attnKernel{&Source{Name: "attention_" + name + ".cu", Code: attentionCode, Options: opts}, warps}
	}
	var want []float32
	for _, c := range []struct {
		name string
		kn   attnKernel
	}{
		{"default", attnDefault},
		{"w8qreg", variant("w8qreg", 8, "-DAT_QREG=1", "-DAT_MINB=1")},
		{"w4qreg", variant("w4qreg", 4, "-DAT_WARPS=4", "-DAT_QREG=1", "-DAT_MINB=1")},
	} {
		kn := c.kn
		bb.Run(c.name, func(bb *testing.B) {
			defer func(d attnKernel) { attnDefault = d }(attnDefault)
			attnDefault = kn
			run := func() {
				y, err := op(b, q, k, v)
				if err != nil {
					bb.Fatal(err)
				}
				y.Free()
			}
			// Compile, warm up and check against the default kernel (every
			// variant computes each row the same way: the results must be
			// equal).
			y, err := op(b, q, k, v)
			if err != nil {
				bb.Fatal(err)
			}
			got, err := b.Download(y)
			if err != nil {
				bb.Fatal(err)
			}
			y.Free()
			if want == nil {
				want = got
			} else if !slices.Equal(got, want) {
				bb.Errorf("%s: result differs from the default kernel's", kn.src.Name)
			}
			if f, err := b.kernel(kn.src, "attention_d128_bf16"); err == nil {
				bb.Logf("%s: %s", kn.src.Name, fnInfo(f))
			}
			bb.ReportMetric(flops/perOp(bb, b, run)/1e12, "TFLOP/s")
		})
	}
}

// BenchmarkWindowAttention times the DiT's shifted-window self-attention on
// a chunk of 6 x 45 x 80 latents (24 heads of 128, bf16).
func BenchmarkWindowAttention(bb *testing.B) {
	g := backend.Grid{F: 6, H: 45, W: 80}
	w := attnWindows(g, true) // starts [0 8 24 29] x [0 8 24 40 56 64]
	const heads, d = 24, 128
	flops := 4 * float64(g.Tokens()) * float64(g.F*swiftvr.Window*swiftvr.Window) * d * heads
	attnBench(bb, g.Tokens(), g.Tokens(), heads*d, flops, func(b *Backend, q, k, v backend.Tensor) (backend.Tensor, error) {
		return b.WindowAttention(q, k, v, d, g, w)
	})
}

// BenchmarkAttention times the DiT's cross-attention: 21600 queries over
// 512 keys, 24 heads of 128, bf16.
func BenchmarkAttention(bb *testing.B) {
	const lq, lk, heads, d = 21600, 512, 24, 128
	attnBench(bb, lq, lk, heads*d, 4*float64(lq)*lk*d*heads, func(b *Backend, q, k, v backend.Tensor) (backend.Tensor, error) {
		return b.Attention(q, k, v, d)
	})
}

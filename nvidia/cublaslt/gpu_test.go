package cublaslt

import (
	"github.com/vsr-dev/vsr/internal/testutil"
	"github.com/vsr-dev/vsr/tensor/half"

	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

type gpuEnv struct {
	ctx    *cuda.Context
	stream *cuda.Stream
	h      *Handle
}

var (
	envOnce sync.Once
	env     *gpuEnv
	envErr  error
)

func gpu(t testing.TB) *gpuEnv {
	t.Helper()
	envOnce.Do(func() {
		if err := Load(); err != nil {
			envErr = err
			return
		}
		n, err := cuda.DeviceCount()
		if err != nil {
			envErr = err
			return
		}
		if n == 0 {
			envErr = errors.New("no CUDA device")
			return
		}
		d, err := cuda.GetDevice(0)
		if err != nil {
			envErr = err
			return
		}
		e := &gpuEnv{}
		if e.ctx, envErr = d.PrimaryContext(); envErr != nil {
			return
		}
		if e.stream, envErr = e.ctx.NewStream(); envErr != nil {
			return
		}
		if e.h, envErr = NewHandle(e.ctx); envErr != nil {
			return
		}
		name, _ := d.Name()
		v, _ := Version()
		t.Logf("GPU %s, cuBLASLt %s from %s", name, VersionString(v), LibraryPath())
		env = e
	})
	if envErr != nil {
		t.Skip("no GPU or no cuBLASLt, skipping: " + envErr.Error())
	}
	return env
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func devBuf(t testing.TB, e *gpuEnv, n int) cuda.DevicePtr {
	t.Helper()
	b, err := e.ctx.Alloc(n)
	must(t, err)
	t.Cleanup(func() { b.Free() })
	return b.Ptr()
}

// encode rounds vals to dt in place and returns the device bytes.
func encode(dt DataType, vals []float64) []byte {
	switch dt {
	case R32F:
		out := make([]float32, len(vals))
		for i, v := range vals {
			out[i] = float32(v)
			vals[i] = float64(out[i])
		}
		return cuda.AsBytes(out)
	case R16BF:
		out := make([]uint16, len(vals))
		for i, v := range vals {
			out[i] = half.ToBF16(float32(v))
			vals[i] = float64(half.FromBF16(out[i]))
		}
		return cuda.AsBytes(out)
	default:
		out := make([]uint16, len(vals))
		for i, v := range vals {
			out[i] = half.ToF16(float32(v))
			vals[i] = float64(half.FromF16(out[i]))
		}
		return cuda.AsBytes(out)
	}
}

func decode(dt DataType, b []byte, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		switch dt {
		case R32F:
			out[i] = float64(math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
		case R16BF:
			out[i] = float64(half.FromBF16(uint16(b[2*i]) | uint16(b[2*i+1])<<8))
		default:
			out[i] = float64(half.FromF16(uint16(b[2*i]) | uint16(b[2*i+1])<<8))
		}
	}
	return out
}

// refGemm is the float64 row-major reference of the package doc's formula.
func refGemm(a, b, c []float64, m, n, k int, ta, tb bool, alpha, beta float64) []float64 {
	d := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			acc := 0.0
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if ta {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if tb {
					bv = b[j*k+p]
				}
				acc += av * bv
			}
			d[i*n+j] = alpha * acc
			if beta != 0 {
				d[i*n+j] += beta * c[i*n+j]
			}
		}
	}
	return d
}

var relErr = testutil.RelErr[float64]

func TestGPUMatmul(t *testing.T) {
	e := gpu(t)
	const m, n, k = 257, 129, 520
	type tc struct {
		in, out     DataType
		ta, tb      bool
		alpha, beta float32
	}
	var cases []tc
	for _, in := range []DataType{R16BF, R16F} {
		for _, tt := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			cases = append(cases, tc{in, in, tt[0], tt[1], 1, 0})
		}
		cases = append(cases, tc{in, R32F, false, true, 1, 0}, tc{in, in, false, false, 0.5, 2})
	}
	gemms := map[[2]DataType]*Gemm{}
	defer func() {
		for _, g := range gemms {
			g.Close()
		}
	}()
	for i, c := range cases {
		g := gemms[[2]DataType{c.in, c.out}]
		if g == nil {
			var err error
			g, err = NewGemm(e.h, Config{InputType: c.in, OutputType: c.out})
			must(t, err)
			gemms[[2]DataType{c.in, c.out}] = g
		}
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		a, b, cm := make([]float64, m*k), make([]float64, k*n), make([]float64, m*n)
		for _, s := range [][]float64{a, b, cm} {
			for j := range s {
				s[j] = rng.Float64()*2 - 1
			}
		}
		ab, bb := encode(c.in, a), encode(c.in, b)
		cb := encode(c.out, cm)
		A, B := devBuf(t, e, len(ab)), devBuf(t, e, len(bb))
		C, D := devBuf(t, e, len(cb)), devBuf(t, e, len(cb))
		must(t, e.stream.CopyHtoD(A, ab))
		must(t, e.stream.CopyHtoD(B, bb))
		must(t, e.stream.CopyHtoD(C, cb))
		must(t, e.stream.Memset8(D, 0xff, len(cb)))
		var Cp cuda.DevicePtr
		if c.beta != 0 {
			Cp = C
		}
		_, miss0 := g.Stats()
		if err := g.Matmul(e.stream, A, B, Cp, D, m, n, k, c.ta, c.tb, c.alpha, c.beta); err != nil {
			t.Fatalf("case %+v: %v", c, err)
		}
		out := make([]byte, len(cb))
		must(t, e.stream.CopyDtoH(out, D))
		must(t, e.stream.Synchronize())
		got := decode(c.out, out, m*n)
		want := refGemm(a, b, cm, m, n, k, c.ta, c.tb, float64(c.alpha), float64(c.beta))
		rel := relErr(got, want)
		p, _ := g.Plan(Shape{M: m, N: n, K: k, TransA: c.ta, TransB: c.tb})
		_, miss1 := g.Stats()
		t.Logf("%v x %v -> %v, %v, alpha %g beta %g: rel err %.3g; plan %v (new plan: %v)", c.in, c.in, c.out,
			p.Shape(), c.alpha, c.beta, rel, p, miss1 > miss0)
		if !(rel < 1e-2) {
			t.Errorf("case %+v: relative error %g", c, rel)
		}
	}
	// A second call on a known shape reuses its plan.
	g := gemms[[2]DataType{R16BF, R16BF}]
	h0, m0 := g.Stats()
	p1, err := g.Plan(Shape{M: m, N: n, K: k})
	must(t, err)
	p2, err := g.Plan(Shape{M: m, N: n, K: k})
	must(t, err)
	if h1, m1 := g.Stats(); p1 != p2 || h1 != h0+2 || m1 != m0 {
		t.Errorf("plan cache: hits %d->%d misses %d->%d, same plan %v", h0, h1, m0, m1, p1 == p2)
	}
	// Misaligned pointers are refused.
	if err := g.Matmul(e.stream, 2, 256, 0, 512, m, n, k, false, false, 1, 0); err == nil {
		t.Error("misaligned A accepted")
	}
}

// TestGPUMatmulTiming times a large bf16 GEMM (8192³) with events.
func TestGPUMatmulTiming(t *testing.T) {
	e := gpu(t)
	if testing.Short() {
		t.Skip("short")
	}
	const sz = 8192
	g, err := NewGemm(e.h, Config{InputType: R16BF, OutputType: R16BF})
	must(t, err)
	defer g.Close()
	A, B, D := devBuf(t, e, sz*sz*2), devBuf(t, e, sz*sz*2), devBuf(t, e, sz*sz*2)
	must(t, e.stream.Memset8(A, 0x3c, sz*sz*2)) // bf16 0x3c3c ≈ 0.0115
	must(t, e.stream.Memset8(B, 0x3c, sz*sz*2))
	med := time.Duration(medianGPU(t, e, func() error { return g.Matmul(e.stream, A, B, 0, D, sz, sz, sz, false, true, 1, 0) }) * 1e9)
	p, _ := g.Plan(Shape{M: sz, N: sz, K: sz, TransB: true})
	t.Logf("bf16 %d³ NT: median %v = %.0f TFLOP/s; plan %v", sz, med, 2*float64(sz)*sz*sz/med.Seconds()/1e12, p)
}

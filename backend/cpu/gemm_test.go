package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gemmPaths runs f once per available kernel path (asm when supported, and
// always the pure-Go fallback), restoring the dispatch afterwards.
func gemmPaths(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useAsm
	defer func() { useAsm = saved }()
	if saved {
		useAsm = true
		t.Run("asm", f)
	}
	useAsm = false
	t.Run("go", f)
}

func randFloats(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.Float64()*2 - 1)
	}
	return s
}

// refGemm is a naive float64 reference; it also returns, per element, the
// sum of absolute terms, used to scale the error bound.
func refGemm(m, k, n int, a []float32, lda int, b []float32, bias []float32) (ref, mag []float64) {
	ref = make([]float64, m*n)
	mag = make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, ms float64
			if bias != nil {
				s = float64(bias[j])
				ms = math.Abs(s)
			}
			for p := 0; p < k; p++ {
				t := float64(a[i*lda+p]) * float64(b[p*n+j])
				s += t
				ms += math.Abs(t)
			}
			ref[i*n+j] = s
			mag[i*n+j] = ms
		}
	}
	return ref, mag
}

func TestGemmShapes(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, m := range []int{0, 1, 5, 6, 7, 13, 640} {
			for _, k := range []int{1, 3, 27, 576, 577} {
				for _, n := range []int{1, 3, 16, 17, 48, 64, 65} {
					for _, withBias := range []bool{false, true} {
						if m == 640 && n != 64 && n != 17 {
							continue // keep the test quick
						}
						lda := k + 3 // non-trivial strides
						ldc := n + 5
						a := randFloats(r, max(m, 1)*lda)
						b := randFloats(r, k*n)
						var bias []float32
						if withBias {
							bias = randFloats(r, n)
						}
						const sentinel = float32(12345)
						c := make([]float32, max(m, 1)*ldc)
						for i := range c {
							c[i] = sentinel
						}
						pb := packB(k, n, b)
						gemm(m, a, lda, pb, bias, c, ldc)
						ref, mag := refGemm(m, k, n, a, lda, b, bias)
						name := fmt.Sprintf("m=%d k=%d n=%d bias=%v", m, k, n, withBias)
						for i := 0; i < m; i++ {
							for j := 0; j < ldc; j++ {
								got := c[i*ldc+j]
								if j >= n {
									if got != sentinel {
										t.Fatalf("%s: wrote outside n at (%d,%d)", name, i, j)
									}
									continue
								}
								want := ref[i*n+j]
								if e := math.Abs(float64(got) - want); e > 1e-5*math.Max(mag[i*n+j], 1e-3) {
									t.Fatalf("%s: c[%d][%d]=%v want %v (err %g, mag %g)", name, i, j, got, want, e, mag[i*n+j])
								}
							}
						}
						if m == 0 {
							for i := range c {
								if c[i] != sentinel {
									t.Fatalf("%s: m=0 wrote c", name)
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestGemmDeterminism checks that a row's result is bitwise independent of
// how rows are grouped into calls.
func TestGemmDeterminism(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, shape := range [][2]int{{576, 64}, {27, 64}, {577, 17}, {576, 48}, {5, 3}} {
			k, n := shape[0], shape[1]
			const m = 640
			lda, ldc := k, n
			a := randFloats(r, m*lda)
			pb := packB(k, n, randFloats(r, k*n))
			bias := randFloats(r, n)
			full := make([]float32, m*ldc)
			gemm(m, a, lda, pb, bias, full, ldc)

			check := func(what string, i0, rows int) {
				t.Helper()
				part := make([]float32, rows*ldc)
				gemm(rows, a[i0*lda:], lda, pb, bias, part, ldc)
				for i := 0; i < rows; i++ {
					for j := 0; j < n; j++ {
						x, y := full[(i0+i)*ldc+j], part[i*ldc+j]
						if math.Float32bits(x) != math.Float32bits(y) {
							t.Fatalf("k=%d n=%d %s: row %d col %d: %v (m=%d) != %v", k, n, what, i0+i, j, x, m, y)
						}
					}
				}
			}
			check("rows 3..9", 3, 7)
			for _, g := range []int{1, 2, 4, 5, 7, 11} {
				for i0 := 0; i0 < m; i0 += g {
					check(fmt.Sprintf("groups of %d", g), i0, min(g, m-i0))
				}
			}
		}
	})
}

func TestGemmBiasNil(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		const m, k, n = 13, 27, 17
		a := randFloats(r, m*k)
		pb := packB(k, n, randFloats(r, k*n))
		c0 := make([]float32, m*n)
		c1 := make([]float32, m*n)
		gemm(m, a, k, pb, nil, c0, n)
		gemm(m, a, k, pb, make([]float32, n), c1, n)
		for i := range c0 {
			if math.Float32bits(c0[i]) != math.Float32bits(c1[i]) {
				t.Fatalf("nil bias differs from zero bias at %d: %v vs %v", i, c0[i], c1[i])
			}
		}
		bias := randFloats(r, n)
		c2 := make([]float32, m*n)
		gemm(m, a, k, pb, bias, c2, n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				d := float64(c2[i*n+j]) - float64(c0[i*n+j]) - float64(bias[j])
				if math.Abs(d) > 1e-5 {
					t.Fatalf("bias not applied at (%d,%d): diff %g", i, j, d)
				}
			}
		}
	})
}

func TestGemmNoAlloc(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const m, k, n = 13, 576, 64
	a := randFloats(r, m*k)
	pb := packB(k, n, randFloats(r, k*n))
	bias := randFloats(r, n)
	c := make([]float32, m*n)
	gemm(m, a, k, pb, bias, c, n) // warm the scratch pool
	allocs := testing.AllocsPerRun(100, func() { gemm(m, a, k, pb, bias, c, n) })
	if allocs > 0.1 {
		t.Errorf("gemm allocates %.1f times per call", allocs)
	}
}

func benchGemm(b *testing.B, m, k, n int) {
	r := rand.New(rand.NewPCG(9, 10))
	a := randFloats(r, m*k)
	pb := packB(k, n, randFloats(r, k*n))
	bias := randFloats(r, n)
	c := make([]float32, m*n)
	b.ResetTimer()
	for b.Loop() {
		gemm(m, a, k, pb, bias, c, n)
	}
	flops := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkGemm640x576x64(b *testing.B) { benchGemm(b, 640, 576, 64) }
func BenchmarkGemm640x576x48(b *testing.B) { benchGemm(b, 640, 576, 48) }
func BenchmarkGemm640x27x64(b *testing.B)  { benchGemm(b, 640, 27, 64) }

func BenchmarkGemmGo640x576x64(b *testing.B) {
	saved := useAsm
	useAsm = false
	defer func() { useAsm = saved }()
	benchGemm(b, 640, 576, 64)
}

package cuda

// Tests and benchmark of the fused conv3x3 + bias + PReLU kernels,
// convfused.cu and its generalisation convslice.cu, standalone (no
// Backend): TestFusedConvLayout replays convslice.cu's shared-memory
// layout, ldmatrix/mma fragments and epilogue on the CPU (no GPU needed;
// for one channel group and unstrided pixels it is convfused.cu's);
// TestFusedConv checks both on the GPU against a float64 reference;
// TestFusedConvBench times them against cuDNN plus the backend's
// bias+PReLU pass at 8 x 360 x 640 x 64 -> 64; TestSliceConvBench times
// realesrgan-x4plus's dense-block convolutions.

import (
	"github.com/vsr-dev/vsr/tensor/half"

	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/internal/testutil"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/nvidia/cudnn"
	"github.com/vsr-dev/vsr/nvidia/nvrtc"
)

// The kernel's geometry (the CF_ constants of convfused.cu).
// The layout below must give the backend's fusedSmem.
var _ = [1]int{}[fusedSmemCalc-fusedSmem]

const (
	fusedTM       = 128
	fusedRows     = 2
	fusedRP       = fusedTM + 2
	fusedPixB     = 128
	fusedRowB     = fusedRP * fusedPixB
	fusedStageB   = (fusedRows + 2) * fusedRowB
	fusedFRowB    = 9 * 128
	fusedFiltB    = 64 * fusedFRowB
	fusedSmemCalc = fusedFiltB + 2*fusedStageB + 128 // must equal fusedSmem (206976)
)

// fusedGrid returns the kernel's grid size for a shape on sms
// multiprocessors.
func fusedGrid(n, h, w, sms int) int {
	tiles := n * ((h + fusedRows - 1) / fusedRows) * ((w + fusedTM - 1) / fusedTM)
	return min(tiles, sms)
}

// fusedNT is the number of n8 tiles per warp the kernel uses for c, k with
// ng warp columns (CF_NG).
func fusedNT(c, k, ng int) int {
	switch {
	case c == 64 && k == 48:
		return 6 / ng
	case k == 32 || k == 16:
		return k / 8 / ng
	}
	return 8 / ng
}

// fusedThreads is the block size for ng warp columns (CF_NG) and prod
// loader warps (CF_PRODUCER).
func fusedThreads(ng, prod int) int { return 32 * (4*ng + prod) }

// The kernel's defaults: CF_NG=2, CF_PRODUCER=2.
const fusedDefaultThreads = 32 * (4*2 + 2)

// fusedProblem is one convolution: fp16 x and w (as bits), float32 bias
// and slope (nil: none), and the float64 reference computed from the
// rounded inputs.
type fusedProblem struct {
	N, H, W, C, K int
	// XS and YS are the pixel strides of x and y in values (C and K
	// unless strided), At the first channel y's outputs go to.
	XS, YS, At  int
	x, w        []uint16
	bias, slope []float32
	nslope      int
}

func newFusedProblem(seed uint64, n, h, w, c, k int, bias bool, nslope int) *fusedProblem {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	p := &fusedProblem{N: n, H: h, W: w, C: c, K: k, XS: c, YS: k, nslope: nslope}
	p.x = make([]uint16, n*h*w*c)
	for i := range p.x {
		p.x[i] = half.ToF16(2*r.Float32() - 1)
	}
	p.w = make([]uint16, k*9*c)
	for i := range p.w {
		p.w[i] = half.ToF16(0.12*r.Float32() - 0.06)
	}
	if bias {
		p.bias = make([]float32, k)
		for i := range p.bias {
			p.bias[i] = 0.2*r.Float32() - 0.1
		}
	}
	if nslope > 0 {
		p.slope = make([]float32, nslope)
		for i := range p.slope {
			p.slope[i] = 0.3 * r.Float32()
		}
	}
	return p
}

// strided lays x out with pixels xs values apart (the channels past C
// hold 1000, which must not be read) and y with pixels ys apart, the
// outputs in channels [at, at+K).
func (p *fusedProblem) strided(xs, ys, at int) *fusedProblem {
	x := make([]uint16, p.N*p.H*p.W*xs)
	for i := range p.N * p.H * p.W {
		for c := range xs {
			v := half.ToF16(1000)
			if c < p.C {
				v = p.x[i*p.C+c]
			}
			x[i*xs+c] = v
		}
	}
	p.x, p.XS, p.YS, p.At = x, xs, ys, at
	return p
}

// outputs returns the K outputs of each pixel of y (YS values a pixel),
// and the number of values outside them that were written (y starts as
// all ones, 0xffff).
func (p *fusedProblem) outputs(y []uint16) (out []uint16, stray int) {
	out = make([]uint16, p.N*p.H*p.W*p.K)
	for i := range p.N * p.H * p.W {
		for c := range p.YS {
			v := y[i*p.YS+c]
			if c >= p.At && c < p.At+p.K {
				out[i*p.K+c-p.At] = v
			} else if v != 0xffff {
				stray++
			}
		}
	}
	return out, stray
}

func (p *fusedProblem) String() string {
	act := "prelu"
	if p.slope == nil {
		act = "none"
	} else if p.nslope == 1 {
		act = "prelu(shared slope)"
	}
	str := ""
	if p.XS != p.C || p.YS != p.K {
		str = fmt.Sprintf(" (strides %d, %d at %d)", p.XS, p.YS, p.At)
	}
	return fmt.Sprintf("n%d %dx%dx%d -> k%d%s bias=%v act=%s", p.N, p.H, p.W, p.C, p.K, str, p.bias != nil, act)
}

// reference returns y in float64.
func (p *fusedProblem) reference() []float64 {
	N, H, W, C, K := p.N, p.H, p.W, p.C, p.K
	xf := make([]float64, N*H*W*C)
	for i := range xf {
		xf[i] = float64(half.FromF16(p.x[i/C*p.XS+i%C]))
	}
	wf := make([]float64, len(p.w))
	for i, v := range p.w {
		wf[i] = float64(half.FromF16(v))
	}
	y := make([]float64, N*H*W*K)
	var wg sync.WaitGroup
	for n := 0; n < N; n++ {
		for h := 0; h < H; h++ {
			wg.Add(1)
			go func(n, h int) {
				defer wg.Done()
				for ww := 0; ww < W; ww++ {
					out := y[((n*H+h)*W+ww)*K:][:K]
					for k := 0; k < K; k++ {
						s := 0.0
						if p.bias != nil {
							s = float64(p.bias[k])
						}
						for ky := 0; ky < 3; ky++ {
							hh := h + ky - 1
							if hh < 0 || hh >= H {
								continue
							}
							for kx := 0; kx < 3; kx++ {
								wx := ww + kx - 1
								if wx < 0 || wx >= W {
									continue
								}
								xs := xf[((n*H+hh)*W+wx)*C:][:C]
								ws := wf[((k*3+ky)*3+kx)*C:][:C]
								for c := range xs {
									s += xs[c] * ws[c]
								}
							}
						}
						if p.slope != nil && s < 0 {
							if p.nslope == 1 {
								s *= float64(p.slope[0])
							} else {
								s *= float64(p.slope[k])
							}
						}
						out[k] = s
					}
				}
			}(n, h)
		}
	}
	wg.Wait()
	return y
}

// fusedCompare returns ||y - ref|| / ||ref|| and a description of the
// worst errors and of outputs that are NaN (never written: the buffer
// starts as NaN).
func fusedCompare(p *fusedProblem, y []uint16, ref []float64) (float64, string) {
	var num, den float64
	nan := 0
	type bad struct {
		i int
		d float64
	}
	var worst []bad
	for i, r := range ref {
		g := float64(half.FromF16(y[i]))
		if math.IsNaN(g) {
			nan++
			if nan <= 5 {
				worst = append(worst, bad{i, math.NaN()})
			}
			continue
		}
		d := g - r
		num += d * d
		den += r * r
		if math.Abs(d) > 0.02+0.01*math.Abs(r) && len(worst) < 12 {
			worst = append(worst, bad{i, d})
		}
	}
	e := math.Sqrt(num / den)
	if nan > 0 {
		e = math.NaN()
	}
	var b strings.Builder
	if nan > 0 {
		fmt.Fprintf(&b, "%d outputs not written (NaN); ", nan)
	}
	for _, w := range worst {
		k := w.i % p.K
		px := w.i / p.K
		ww := px % p.W
		h := px / p.W % p.H
		n := px / p.W / p.H
		fmt.Fprintf(&b, "[n%d h%d w%d k%d got %v want %.4f] ", n, h, ww, k, half.FromF16(y[w.i]), ref[w.i])
	}
	return e, b.String()
}

// ---- CPU replay of the kernel ------------------------------------------

// fusedEmu replays convslice.cu thread by thread on the CPU: the same
// address arithmetic, shared-memory image, fragment semantics (from the PTX
// ISA: ldmatrix, mma.m16n8k16) and epilogue, so that the layout and index
// math are checked without a GPU.
type fusedEmu struct {
	p    *fusedProblem
	ng   int
	prod int
	tm   int // CF_TM
	rows int // CF_FROWS
	smem []byte
	y    []uint16
}

func (e *fusedEmu) tileRows() int { return 256 / e.tm }
func (e *fusedEmu) rowB() int     { return (e.tm + 2) * fusedPixB }

func (e *fusedEmu) cpAsync(dst int, src []uint16) {
	if dst%16 != 0 {
		panic(fmt.Sprintf("cp.async to unaligned shared address %d", dst))
	}
	for i := 0; i < 8; i++ {
		var v uint16
		if src != nil {
			v = src[i]
		}
		binary.LittleEndian.PutUint16(e.smem[dst+2*i:], v)
	}
}

func (e *fusedEmu) stage(t, g, sb, HP, WS, tid, nthr int) {
	p := e.p
	ch8 := min(8, (p.C-64*g)/8)
	ppi := nthr / ch8
	ws, r := t%WS, t/WS
	hp, nn := r%HP, r/HP
	h0, w0 := hp*e.tileRows(), ws*e.tm
	ch, jj := tid%ch8, tid/ch8
	if jj >= ppi {
		return
	}
	for s := 0; s < e.tileRows()+2; s++ {
		hh := h0 - 1 + s
		rowok := hh >= 0 && hh < p.H
		for j := jj; j < e.tm+2; j += ppi {
			ww := w0 - 1 + j
			var src []uint16
			if rowok && ww >= 0 && ww < p.W {
				src = p.x[((nn*p.H+hh)*p.W+ww)*p.XS+g*64+ch*8:][:8]
			}
			e.cpAsync(sb+s*e.rowB()+j*fusedPixB+((ch^(j&7))<<4), src)
		}
	}
}

// ldsm: register j of lane l is row l/4, elements 2(l%4), 2(l%4)+1 of
// matrix j, whose row r is the 16 bytes at lane 8j+r's address.
func (e *fusedEmu) ldsm(addr *[32]int, n int) (out [32][4]uint32) {
	for l := 0; l < 32; l++ {
		if addr[l]%16 != 0 {
			panic(fmt.Sprintf("ldmatrix address %d of lane %d is unaligned", addr[l], l))
		}
	}
	for j := 0; j < n; j++ {
		for l := 0; l < 32; l++ {
			out[l][j] = binary.LittleEndian.Uint32(e.smem[addr[8*j+l/4]+4*(l%4):])
		}
	}
	return out
}

// fusedMMA: d = a*b + c for m16n8k16 with the PTX fragment layouts.
func fusedMMA(acc *[32][4]float32, a *[32][4]uint32, b *[32][2]uint32) {
	var A [16][16]float32
	var B [16][8]float32
	lo := func(u uint32) float32 { return half.FromF16(uint16(u)) }
	hi := func(u uint32) float32 { return half.FromF16(uint16(u >> 16)) }
	for l := 0; l < 32; l++ {
		g, t := l/4, l%4
		A[g][2*t], A[g][2*t+1] = lo(a[l][0]), hi(a[l][0])
		A[g+8][2*t], A[g+8][2*t+1] = lo(a[l][1]), hi(a[l][1])
		A[g][2*t+8], A[g][2*t+9] = lo(a[l][2]), hi(a[l][2])
		A[g+8][2*t+8], A[g+8][2*t+9] = lo(a[l][3]), hi(a[l][3])
		B[2*t][g], B[2*t+1][g] = lo(b[l][0]), hi(b[l][0])
		B[2*t+8][g], B[2*t+9][g] = lo(b[l][1]), hi(b[l][1])
	}
	for l := 0; l < 32; l++ {
		g, t := l/4, l%4
		for e := 0; e < 4; e++ {
			row, col := g+8*(e>>1), 2*t+(e&1)
			var s float32
			for k := 0; k < 16; k++ {
				s += A[row][k] * B[k][col]
			}
			acc[l][e] += s
		}
	}
}

func (e *fusedEmu) run(grid int) {
	p := e.p
	N, H, W, C, K := p.N, p.H, p.W, p.C, p.K
	NT := fusedNT(C, K, e.ng)
	KR, G := e.ng*NT*8, (C+63)/64
	if G*KR > e.rows {
		panic(fmt.Sprintf("%d filter rows for %v, room for %d", G*KR, p, e.rows))
	}
	threads := fusedThreads(e.ng, e.prod)
	loaders := threads
	if e.prod > 0 {
		loaders = 32 * e.prod
	}
	fb, sb0 := 0, e.rows*fusedFRowB
	stageB := (e.tileRows() + 2) * e.rowB()
	HP, WS := (H+e.tileRows()-1)/e.tileRows(), (W+e.tm-1)/e.tm
	ntiles := N * HP * WS
	e.smem = make([]byte, sb0+2*stageB)
	e.y = make([]uint16, N*H*W*p.YS)
	for i := range e.y {
		e.y[i] = 0xffff
	}
	for cta := 0; cta < grid && cta < ntiles; cta++ {
		// filter: row R = g*KR + n
		for tid := 0; tid < threads; tid++ {
			for i := tid; i < G*KR*72; i += threads {
				row, q := i/72, i%72
				tap, ch := q>>3, q&7
				gg, n := row/KR, row%KR
				cin := gg*64 + ch*8
				var src []uint16
				if n < K && cin < C {
					src = p.w[(n*9+tap)*C+cin:][:8]
				}
				e.cpAsync(fb+row*fusedFRowB+tap*128+((ch^(row&7))<<4), src)
			}
		}
		buf := 0
		for t := cta; t < ntiles; t += grid {
			accs := make([][][][32][4]float32, 4*e.ng)
			for warp := range accs {
				accs[warp] = make([][][32][4]float32, 4)
				for i := range accs[warp] {
					accs[warp][i] = make([][32][4]float32, NT)
				}
			}
			for g := 0; g < G; g, buf = g+1, buf^1 {
				sb := sb0 + buf*stageB
				for tid := 0; tid < loaders; tid++ {
					e.stage(t, g, sb, HP, WS, tid, loaders)
				}
				for warp := 0; warp < 4*e.ng; warp++ {
					e.group(accs[warp], warp, NT, min(4, (C-64*g)/16), fb+g*KR*fusedFRowB, sb)
				}
			}
			for warp := 0; warp < 4*e.ng; warp++ {
				e.store(accs[warp], t, warp, NT, HP, WS)
			}
		}
	}
}

// lanes returns a warp's fragment addresses: aoff (per kx) and bptr.
func (e *fusedEmu) lanes(warp, NT, fb int) (aoff [3][32]int, bptr [32]int) {
	mg, ng := warp&3, warp>>2
	rOut, pw := mg/(e.tm/64), (mg%(e.tm/64))*64
	nbase := ng * NT * 8
	for l := 0; l < 32; l++ {
		lpix, hi := (l&7)+((l>>3)&1)*8, l>>4
		for kx := 0; kx < 3; kx++ {
			j := pw + kx + lpix
			aoff[kx][l] = rOut*e.rowB() + j*fusedPixB + ((hi ^ (j & 7)) << 4)
		}
		nl := nbase + (l & 7) + ((l>>4)&1)*8
		bptr[l] = fb + nl*fusedFRowB + ((((l >> 3) & 1) ^ (l & 7)) << 4)
	}
	return aoff, bptr
}

// group replays cf_group: one channel group's products into acc, with the
// group's filter rows at fb.
func (e *fusedEmu) group(acc [][][32][4]float32, warp, NT, ncc, fb, sb int) {
	aoff, bptr := e.lanes(warp, NT, fb)
	for tap := 0; tap < 9; tap++ {
		ky, kx := tap/3, tap%3
		for cc := 0; cc < ncc; cc++ {
			bf := make([][32][2]uint32, NT)
			var addr [32]int
			for b := 0; b < NT/2; b++ {
				for l := 0; l < 32; l++ {
					addr[l] = (bptr[l] ^ (cc << 5)) + tap*128 + b*16*fusedFRowB
				}
				r := e.ldsm(&addr, 4)
				for l := 0; l < 32; l++ {
					bf[2*b][l] = [2]uint32{r[l][0], r[l][1]}
					bf[2*b+1][l] = [2]uint32{r[l][2], r[l][3]}
				}
			}
			if NT&1 == 1 {
				for l := 0; l < 32; l++ {
					addr[l] = (bptr[l] ^ (cc << 5)) + tap*128 + (NT/2)*16*fusedFRowB
				}
				r := e.ldsm(&addr, 2)
				for l := 0; l < 32; l++ {
					bf[NT-1][l] = [2]uint32{r[l][0], r[l][1]}
				}
			}
			for i := 0; i < 4; i++ {
				for l := 0; l < 32; l++ {
					addr[l] = ((sb + aoff[kx][l]) ^ (cc << 5)) + ky*e.rowB() + i*16*fusedPixB
				}
				af := e.ldsm(&addr, 4)
				for nt := 0; nt < NT; nt++ {
					fusedMMA(&acc[i][nt], &af, &bf[nt])
				}
			}
		}
	}
}

// store replays cf_store for one warp of tile t.
func (e *fusedEmu) store(acc [][][32][4]float32, t, warp, NT, HP, WS int) {
	p := e.p
	H, W, K := p.H, p.W, p.K
	mg, ng := warp&3, warp>>2
	rOut, pw := mg/(e.tm/64), (mg%(e.tm/64))*64
	nbase := ng * NT * 8
	// epilogue
	ws, rr := t%WS, t/WS
	hp, nn := rr%HP, rr/HP
	hrow, wbase := hp*e.tileRows()+rOut, ws*e.tm+pw
	if hrow >= H {
		return
	}
	var bv, sv [8][2][32]float32
	for l := 0; l < 32; l++ {
		tq := l & 3
		for nt := 0; nt < NT; nt++ {
			for x := 0; x < 2; x++ {
				chn := nbase + nt*8 + 2*tq + x
				ok := chn < K
				if p.bias != nil && ok {
					bv[nt][x][l] = p.bias[chn]
				}
				switch {
				case p.slope == nil:
					sv[nt][x][l] = 1
				case !ok:
				case p.nslope == 1:
					sv[nt][x][l] = p.slope[0]
				default:
					sv[nt][x][l] = p.slope[chn]
				}
			}
		}
	}
	yrow := ((nn*H+hrow)*W)*p.YS + p.At
	for i := 0; i < 4; i++ {
		for hf := 0; hf < 2; hf++ {
			var v [32][8]uint32
			for l := 0; l < 32; l++ {
				for nt := 0; nt < NT; nt++ {
					a0 := acc[i][nt][l][2*hf] + bv[nt][0][l]
					a1 := acc[i][nt][l][2*hf+1] + bv[nt][1][l]
					if a0 < 0 {
						a0 *= sv[nt][0][l]
					}
					if a1 < 0 {
						a1 *= sv[nt][1][l]
					}
					v[l][nt] = uint32(half.ToF16(a0)) | uint32(half.ToF16(a1))<<16
				}
			}
			shfl := func(s *[32]uint32, m int) (r [32]uint32) {
				for l := 0; l < 32; l++ {
					r[l] = s[l^m]
				}
				return r
			}
			for q := 0; NT%4 == 0 && q < NT/4; q++ {
				var s0, s1 [32]uint32
				for l := 0; l < 32; l++ {
					u := v[l][4*q:]
					if l&2 != 0 {
						s0[l], s1[l] = u[0], u[1]
					} else {
						s0[l], s1[l] = u[2], u[3]
					}
				}
				r0, r1 := shfl(&s0, 2), shfl(&s1, 2)
				for l := 0; l < 32; l++ {
					u := v[l][4*q:]
					if l&2 != 0 {
						u[0], u[1] = r0[l], r1[l]
					} else {
						u[2], u[3] = r0[l], r1[l]
					}
					if l&1 != 0 {
						s0[l], s1[l] = u[0], u[2]
					} else {
						s0[l], s1[l] = u[1], u[3]
					}
				}
				r0, r1 = shfl(&s0, 1), shfl(&s1, 1)
				for l := 0; l < 32; l++ {
					u := v[l][4*q:]
					if l&1 != 0 {
						u[0], u[2] = r0[l], r1[l]
					} else {
						u[1], u[3] = r0[l], r1[l]
					}
				}
			}
			for l := 0; l < 32; l++ {
				g, tq := l>>2, l&3
				wcol := wbase + i*16 + g + hf*8
				if wcol >= W {
					continue
				}
				if NT%4 == 0 {
					for q := 0; q < NT/4; q++ {
						chn := nbase + 32*q + tq*8
						if chn < K {
							o := yrow + wcol*p.YS + chn
							if o%8 != 0 {
								panic("unaligned 16-byte store")
							}
							for j := 0; j < 4; j++ {
								e.y[o+2*j], e.y[o+2*j+1] = uint16(v[l][4*q+j]), uint16(v[l][4*q+j]>>16)
							}
						}
					}
				} else {
					for nt := 0; nt < NT; nt++ {
						chn := nbase + nt*8 + 2*tq
						if chn < K {
							o := yrow + wcol*p.YS + chn
							e.y[o], e.y[o+1] = uint16(v[l][nt]), uint16(v[l][nt]>>16)
						}
					}
				}
			}
		}
	}
}

func TestFusedConvLayout(t *testing.T) {
	if !strings.Contains(fusedConvSource, fmt.Sprint(fusedSmem)) || !strings.Contains(sliceConvCode, fmt.Sprint(sliceSmem)) {
		t.Fatalf("convfused.cu and convslice.cu do not mention the shared-memory sizes %d and %d this test assumes", fusedSmem, sliceSmem)
	}
	type shape struct {
		n, h, w, c, k, grid int
		bias                bool
		nslope              int
		xs, ys, at          int // strides and output channel (0: plain)
	}
	for _, v := range [][4]int{{2, 1, 128, 64}, {1, 1, 128, 64}, {2, 0, 128, 64}, {2, 2, 128, 64}, {2, 2, 64, 64}, {2, 0, 64, 64}, {2, 2, 64, 96}, {1, 2, 64, 96}} {
		ng, prod, tm, rows := v[0], v[1], v[2], v[3]
		for i, c := range []shape{
			{1, 5, 37, 64, 64, 2, true, 64, 0, 0, 0},
			{1, 4, 130, 64, 48, 3, true, 1, 0, 0, 0},
			{1, 3, 20, 32, 24, 1, false, 0, 0, 0, 0},
			{1, 3, 9, 48, 16, 1, true, 16, 0, 0, 0},
			{1, 2, 9, 16, 64, 1, true, 64, 0, 0, 0},
			// a dense block's: prefixes of a 192-channel buffer into its slices
			{1, 5, 70, 64, 32, 2, true, 1, 192, 192, 64},
			{1, 6, 67, 96, 32, 3, true, 1, 192, 192, 96},
			{1, 3, 20, 128, 16, 1, true, 1, 136, 24, 8},
			{1, 5, 21, 160, 32, 2, false, 0, 192, 32, 0},
			{1, 4, 19, 192, 32, 1, true, 32, 200, 40, 8},
		} {
			p := newFusedProblem(uint64(100+i), c.n, c.h, c.w, c.c, c.k, c.bias, c.nslope)
			if c.xs > 0 {
				p.strided(c.xs, c.ys, c.at)
			}
			NT := fusedNT(c.c, c.k, ng)
			if (c.c+63)/64*ng*NT*8 > rows {
				continue
			}
			e := &fusedEmu{p: p, ng: ng, prod: prod, tm: tm, rows: rows}
			e.run(c.grid)
			y, stray := p.outputs(e.y)
			err, detail := fusedCompare(p, y, p.reference())
			if !(err < 3e-3) || stray > 0 {
				t.Errorf("CF_NG=%d CF_PRODUCER=%d CF_TM=%d CF_FROWS=%d %v: replay relative error %.3g, %d values written outside the outputs: %s", ng, prod, tm, rows, p, err, stray, detail)
			} else {
				t.Logf("CF_NG=%d CF_PRODUCER=%d CF_TM=%d CF_FROWS=%d %v: replay relative error %.3g", ng, prod, tm, rows, p, err)
			}
		}
	}
}

// ---- GPU ---------------------------------------------------------------

type fusedKernel struct {
	ctx *cu.Context
	mod *cu.Module
	fn  *cu.Function
	sms int
	log string
}

var (
	fusedOnce sync.Once
	fusedK    *fusedKernel
	fusedErr  error
	fusedSkip string
)

// fusedCompile compiles convfused.cu, or convslice.cu with slice, with
// extra options (e.g. -D probes).
func fusedCompile(ctx *cu.Context, major, minor int, slice bool, opts ...string) (*cu.Module, string, error) {
	comp, err := nvrtc.NewCompiler(major, minor)
	if err != nil {
		return nil, "", err
	}
	base := []string{"-default-device"}
	prog := nvrtc.Program{Name: "convfused.cu", Source: fusedConvSource, Options: append(append(base, "--ptxas-options=-v"), opts...)}
	if slice {
		prog.Name, prog.Source = "convslice.cu", sliceConvCode
	}
	out, err := comp.Compile(prog)
	if err != nil {
		// perhaps this NVRTC refuses --ptxas-options: try without
		prog.Options = append(base, opts...)
		out2, err2 := comp.Compile(prog)
		if err2 != nil {
			return nil, "", fmt.Errorf("%v\n(with --ptxas-options=-v: %v)", err2, err)
		}
		out = out2
	}
	mod, err := ctx.LoadModule(out.Image)
	return mod, fmt.Sprintf("%s %s, log:\n%s", out.Kind, out.Arch, out.Log), err
}

func fusedSetup(t testing.TB) *fusedKernel {
	t.Helper()
	fusedOnce.Do(func() {
		if err := testutil.NoGPU(); err != nil {
			fusedSkip = err.Error()
			return
		}
		k := &fusedKernel{}
		dev, err := cu.GetDevice(0)
		if err != nil {
			fusedErr = err
			return
		}
		major, minor, err := dev.ComputeCapability()
		if err != nil {
			fusedErr = err
			return
		}
		if major < 8 {
			fusedSkip = fmt.Sprintf("compute capability %d.%d < 8.0", major, minor)
			return
		}
		if k.sms, err = dev.SMCount(); err != nil {
			fusedErr = err
			return
		}
		if k.ctx, err = dev.PrimaryContext(); err != nil {
			fusedErr = err
			return
		}
		start := time.Now()
		if k.mod, k.log, err = fusedCompile(k.ctx, major, minor, false); err != nil {
			fusedErr = err
			return
		}
		k.log = fmt.Sprintf("compiled in %v: %s", time.Since(start).Round(time.Millisecond), k.log)
		if k.fn, fusedErr = fusedLoad(k.mod); fusedErr != nil {
			return
		}
		fusedK = k
	})
	if fusedSkip != "" {
		t.Skip(fusedSkip)
	}
	if fusedErr != nil {
		t.Fatal(fusedErr)
	}
	unlock, err := fusedK.ctx.LockThread()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	return fusedK
}

func fusedLoad(mod *cu.Module) (*cu.Function, error) {
	fn, err := mod.Function("conv3x3_bias_prelu_f16")
	if err != nil {
		return nil, err
	}
	if err := fn.SetAttribute(cu.FuncMaxDynamicSharedSizeBytes, sliceSmem); err != nil {
		return nil, err
	}
	return fn, nil
}

// fnInfo reports a compiled kernel's registers, local memory and static
// shared memory.
func fnInfo(fn *cu.Function) string {
	regs, _ := fn.Attribute(cu.FuncNumRegs)
	local, _ := fn.Attribute(cu.FuncAttribute(3)) // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
	static, _ := fn.Attribute(cu.FuncSharedSizeBytes)
	return fmt.Sprintf("%d registers, %d bytes local memory, %d bytes static shared memory", regs, local, static)
}

// fusedLaunch queues a build of convfused.cu, or of convslice.cu with
// slice (with the largest build's shared memory), for p's shape; a slice
// build also gets p's strides, y at p's output channel.
func fusedLaunch(fn *cu.Function, threads, sms int, st *cu.Stream, x, w, bias, slope cu.DevicePtr, y cu.DevicePtr, p *fusedProblem, slice bool) error {
	cfg := cu.LaunchConfig{
		Grid: cu.Dim3{X: uint32(fusedGrid(p.N, p.H, p.W, sms))}, Block: cu.Dim3{X: uint32(threads)},
		SharedMem: sliceSmem, Stream: st,
	}
	if !slice {
		if p.XS != p.C || p.YS != p.K {
			return fmt.Errorf("convfused.cu has no strides (%v)", p)
		}
		return fn.Launch(cfg, x, w, bias, slope, int32(p.nslope), y, int32(p.N), int32(p.H), int32(p.W), int32(p.C), int32(p.K))
	}
	return fn.Launch(cfg, x, w, bias, slope, int32(p.nslope), y.Add(2*p.At), int32(p.N), int32(p.H), int32(p.W), int32(p.C), int32(p.K), int32(p.XS), int32(p.YS))
}

// fusedBufs holds one problem's device buffers.
type fusedBufs struct {
	x, w, bias, slope, y *cu.Buffer
}

func (b *fusedBufs) free() {
	for _, p := range []*cu.Buffer{b.x, b.w, b.bias, b.slope, b.y} {
		if p != nil {
			p.Free()
		}
	}
}

func (b *fusedBufs) ptrs() (x, w, bias, slope, y cu.DevicePtr) {
	if b.bias != nil {
		bias = b.bias.Ptr()
	}
	if b.slope != nil {
		slope = b.slope.Ptr()
	}
	return b.x.Ptr(), b.w.Ptr(), bias, slope, b.y.Ptr()
}

func fusedUpload(t testing.TB, ctx *cu.Context, st *cu.Stream, p *fusedProblem) *fusedBufs {
	t.Helper()
	up := func(b []byte) *cu.Buffer {
		if len(b) == 0 {
			return nil
		}
		buf, err := ctx.Alloc(len(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CopyHtoD(buf.Ptr(), b); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	b := &fusedBufs{x: up(cu.AsBytes(p.x)), w: up(cu.AsBytes(p.w)), bias: up(cu.AsBytes(p.bias)), slope: up(cu.AsBytes(p.slope))}
	var err error
	ny := p.N * p.H * p.W * p.YS * 2
	if b.y, err = ctx.Alloc(ny); err != nil {
		t.Fatal(err)
	}
	if err := st.Memset8(b.y.Ptr(), 0xff, ny); err != nil { // NaN: unwritten outputs show, as stray writes
		t.Fatal(err)
	}
	return b
}

func TestFusedConv(t *testing.T) {
	k := fusedSetup(t)
	t.Log(k.log)
	t.Log("conv3x3_bias_prelu_f16: ", fnInfo(k.fn))
	st, err := k.ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	type kernel struct {
		name          string
		fn            *cu.Function
		threads, rows int
		slice         bool // convslice.cu: strides and several channel groups
	}
	kernels := []kernel{{"default", k.fn, fusedDefaultThreads, 64, false}}
	major, minor, err := k.ctx.Device().ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range fusedVariants() {
		if strings.Contains(v, "PROBE") {
			continue
		}
		slice, opts := fusedVariant(v)
		mod, log, err := fusedCompile(k.ctx, major, minor, slice, opts...)
		if err != nil {
			t.Errorf("variant %q: %v", v, err)
			continue
		}
		defer mod.Close()
		fn, err := fusedLoad(mod)
		if err != nil {
			t.Errorf("variant %q: %v", v, err)
			continue
		}
		t.Logf("variant %q: %s; %s", v, fnInfo(fn), log)
		kernels = append(kernels, kernel{v, fn, fusedVariantThreads(opts), fusedVariantRows(opts), slice})
	}
	for i, c := range []struct {
		n, h, w, c, k int
		bias          bool
		nslope        int
		xs, ys, at    int // strides and output channel (0: plain)
	}{
		{2, 19, 37, 64, 64, true, 64, 0, 0, 0},
		{2, 19, 130, 64, 64, true, 64, 0, 0, 0},
		{2, 19, 37, 64, 48, true, 48, 0, 0, 0},
		{2, 19, 130, 64, 48, true, 48, 0, 0, 0},
		{2, 19, 130, 64, 64, true, 1, 0, 0, 0},
		{2, 19, 130, 64, 48, true, 0, 0, 0, 0}, // the model's last conv: bias, no activation
		{2, 19, 37, 32, 64, true, 64, 0, 0, 0},
		{1, 6, 50, 16, 24, false, 24, 0, 0, 0},
		{1, 7, 131, 48, 40, true, 40, 0, 0, 0},
		{1, 1, 1, 64, 64, true, 64, 0, 0, 0},
		// realesrgan-x4plus's dense block: prefixes of a 192-channel
		// buffer into its 32-channel slices
		{2, 19, 130, 64, 32, true, 1, 192, 192, 64},
		{2, 19, 131, 96, 32, true, 1, 192, 192, 96},
		{1, 21, 67, 128, 32, true, 1, 192, 192, 128},
		{1, 21, 67, 160, 32, true, 1, 192, 192, 160},
		{1, 9, 70, 192, 32, false, 0, 200, 32, 0},
		{1, 9, 70, 128, 16, true, 16, 136, 24, 8},
	} {
		p := newFusedProblem(uint64(i+1), c.n, c.h, c.w, c.c, c.k, c.bias, c.nslope)
		if c.xs > 0 {
			p.strided(c.xs, c.ys, c.at)
		}
		ref := p.reference()
		for _, kn := range kernels {
			if filterRows(c.c, c.k) > kn.rows || !kn.slice && (c.xs > 0 || c.c > 64) {
				continue
			}
			b := fusedUpload(t, k.ctx, st, p)
			x, w, bias, slope, y := b.ptrs()
			if err := fusedLaunch(kn.fn, kn.threads, k.sms, st, x, w, bias, slope, y, p, kn.slice); err != nil {
				t.Fatal(err)
			}
			all := make([]uint16, p.N*p.H*p.W*p.YS)
			if err := st.CopyDtoH(cu.AsBytes(all), y); err != nil {
				t.Fatal(err)
			}
			if err := st.Synchronize(); err != nil {
				t.Fatal(err)
			}
			b.free()
			out, stray := p.outputs(all)
			e, detail := fusedCompare(p, out, ref)
			if !(e < 3e-3) || stray > 0 {
				t.Errorf("%s %v: relative error %.3g, %d values written outside the outputs: %s", kn.name, p, e, stray, detail)
			} else {
				t.Logf("%s %v: relative error %.3g", kn.name, p, e)
			}
		}
	}
}

// fusedTime returns the median of runs timings of f (after warm calls),
// each bracketed by events on st.
func fusedTime(st *cu.Stream, warm, runs int, f func() error) (time.Duration, error) {
	for i := 0; i < warm; i++ {
		if err := f(); err != nil {
			return 0, err
		}
	}
	a, err := st.Context().NewEvent(cu.EventDefault)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	b, err := st.Context().NewEvent(cu.EventDefault)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	var ds []time.Duration
	for i := 0; i < runs; i++ {
		if err := a.Record(st); err != nil {
			return 0, err
		}
		if err := f(); err != nil {
			return 0, err
		}
		if err := b.Record(st); err != nil {
			return 0, err
		}
		if err := b.Synchronize(); err != nil {
			return 0, err
		}
		d, err := cu.ElapsedTime(a, b)
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

func TestFusedConvBench(t *testing.T) {
	k := fusedSetup(t)
	if testing.Short() {
		t.Skip("benchmark; not in -short")
	}
	const N, H, W, C, K = 8, 360, 640, 64, 64
	flops := 2.0 * N * H * W * K * 9 * C
	st, err := k.ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// Inputs: a random pattern of 1<<22 values repeated over x.
	r := rand.New(rand.NewPCG(7, 7))
	pat := make([]uint16, 1<<22)
	for i := range pat {
		pat[i] = half.ToF16(2*r.Float32() - 1)
	}
	p := &fusedProblem{N: N, H: H, W: W, C: C, K: K, XS: C, YS: K, nslope: K}
	p.x = make([]uint16, N*H*W*C)
	for i := 0; i < len(p.x); i += len(pat) {
		copy(p.x[i:], pat)
	}
	p.w = make([]uint16, K*9*C)
	for i := range p.w {
		p.w[i] = half.ToF16(0.12*r.Float32() - 0.06)
	}
	p.bias, p.slope = make([]float32, K), make([]float32, K)
	for i := range p.bias {
		p.bias[i] = 0.2*r.Float32() - 0.1
		p.slope[i] = 0.3 * r.Float32()
	}
	b := fusedUpload(t, k.ctx, st, p)
	defer b.free()
	x, w, bias, slope, y := b.ptrs()
	ybytes := N * H * W * K * 2

	report := func(name string, d time.Duration, fl float64) {
		us := float64(d.Nanoseconds()) / 1e3
		if fl > 0 {
			t.Logf("%-44s %8.1f us  %6.1f TFLOP/s", name, us, fl/(us*1e-6)/1e12)
		} else {
			t.Logf("%-44s %8.1f us", name, us)
		}
	}
	fused := func(fn *cu.Function, threads int, slice bool) func() error {
		return func() error { return fusedLaunch(fn, threads, k.sms, st, x, w, bias, slope, y, p, slice) }
	}
	t.Logf("shape %v, %.1f GFLOP per call, grid %d x %d threads, %d bytes dynamic shared memory; %s",
		p, flops/1e9, fusedGrid(N, H, W, k.sms), fusedDefaultThreads, fusedSmem, fnInfo(k.fn))
	dFused, err := fusedTime(st, 3, 20, fused(k.fn, fusedDefaultThreads, false))
	if err != nil {
		t.Fatal(err)
	}
	report("fused conv3x3+bias+prelu", dFused, flops)

	// Reference point: a device-to-device copy of one activation.
	cp, err := k.ctx.Alloc(ybytes)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Free()
	if d, err := fusedTime(st, 2, 10, func() error { return st.CopyDtoD(cp.Ptr(), x, ybytes) }); err == nil {
		t.Logf("%-44s %8.1f us  (%.0f GB/s read+write)", "copy of one activation", float64(d.Nanoseconds())/1e3, 2*float64(ybytes)/d.Seconds()/1e9)
	}

	// The backend's way: cuDNN, then bias_act.
	h, err := cudnn.NewHandle(k.ctx)
	if err != nil {
		t.Logf("no cuDNN (%v): compare with the 365 TFLOP/s figure", err)
		return
	}
	defer h.Close()
	if err := h.SetStream(st); err != nil {
		t.Fatal(err)
	}
	cache := cudnn.NewCache(h, cudnn.Options{})
	defer cache.Close()
	conv, err := cache.Get(cudnn.Shape{DType: cudnn.DataHalf, N: N, H: H, W: W, C: C, K: K, KH: 3, KW: 3, PadH: 1, PadW: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ws cu.DevicePtr
	if n := conv.WorkspaceSize(); n > 0 {
		wb, err := k.ctx.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		defer wb.Free()
		ws = wb.Ptr()
	}
	y2, err := k.ctx.Alloc(ybytes)
	if err != nil {
		t.Fatal(err)
	}
	defer y2.Free()
	t.Logf("cuDNN: %v", conv)
	cudnnCall := func() error { return conv.Forward(h, x, w, y2.Ptr(), ws, conv.WorkspaceSize()) }
	dConv, err := fusedTime(st, 3, 20, cudnnCall)
	if err != nil {
		t.Fatal(err)
	}
	report("cuDNN conv", dConv, flops)

	major, minor, err := k.ctx.Device().ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	var act *cu.Function
	actN := int64(N*H*W*K) / 8
	if comp, cerr := nvrtc.NewCompiler(major, minor); cerr != nil {
		err = cerr
	} else if out, cerr := comp.Compile(nvrtc.Program{Name: "vsr_kernels.cu", Source: kernelSource, Options: []string{"--fmad=false", "-default-device"}}); cerr != nil {
		err = cerr
	} else if mod, lerr := k.ctx.LoadModule(out.Image); lerr != nil {
		err = lerr
	} else {
		act, err = mod.Function("bias_act8_f16")
	}
	if err != nil {
		t.Logf("backend bias_act kernel unavailable (%v): cuDNN alone above", err)
		return
	}
	t.Logf("epilogue: backend kernel %s", act.Name())
	epi := func() error {
		blocks := min((actN+255)/256, int64(k.sms)*16)
		return act.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(blocks)}, Block: cu.Dim3{X: 256}, Stream: st},
			y2.Ptr(), y2.Ptr(), bias, int32(K), actN, int32(3), float32(0), slope, int32(K))
	}
	dEpi, err := fusedTime(st, 3, 20, epi)
	if err != nil {
		t.Fatal(err)
	}
	report("bias+prelu pass", dEpi, 0)
	dBoth, err := fusedTime(st, 3, 20, func() error {
		if err := cudnnCall(); err != nil {
			return err
		}
		return epi()
	})
	if err != nil {
		t.Fatal(err)
	}
	report("cuDNN conv + bias+prelu pass", dBoth, flops)
	t.Logf("fused speed-up over cuDNN + pass: %.2fx", dBoth.Seconds()/dFused.Seconds())

	// The two results agree (cuDNN's path rounds to fp16 twice).
	if err := cudnnCall(); err != nil {
		t.Fatal(err)
	}
	if err := epi(); err != nil {
		t.Fatal(err)
	}
	if err := fused(k.fn, fusedDefaultThreads, false)(); err != nil {
		t.Fatal(err)
	}
	g1, g2 := make([]uint16, N*H*W*K), make([]uint16, N*H*W*K)
	if err := st.CopyDtoH(cu.AsBytes(g1), y); err != nil {
		t.Fatal(err)
	}
	if err := st.CopyDtoH(cu.AsBytes(g2), y2.Ptr()); err != nil {
		t.Fatal(err)
	}
	if err := st.Synchronize(); err != nil {
		t.Fatal(err)
	}
	e := fusedRelDiff(g1, g2)
	if !(e < 3e-3) {
		t.Errorf("fused vs cuDNN + pass at the benchmark shape: relative difference %.3g", e)
	} else {
		t.Logf("fused vs cuDNN + pass at the benchmark shape: relative difference %.3g", e)
	}

	// The model's last conv, 64 -> 48 with bias and no activation, into y2.
	{
		const K2 = 48
		fl2 := flops * K2 / K
		p2 := *p
		p2.K, p2.YS, p2.nslope = K2, K2, 0
		d, err := fusedTime(st, 3, 20, func() error {
			return fusedLaunch(k.fn, fusedDefaultThreads, k.sms, st, x, w, bias, 0, y2.Ptr(), &p2, false)
		})
		if err != nil {
			t.Fatal(err)
		}
		report("fused conv3x3 64->48 + bias", d, fl2)
		conv2, err := cache.Get(cudnn.Shape{DType: cudnn.DataHalf, N: N, H: H, W: W, C: C, K: K2, KH: 3, KW: 3, PadH: 1, PadW: 1})
		if err == nil && conv2.WorkspaceSize() <= conv.WorkspaceSize() {
			n8 := int64(N*H*W*K2) / 8
			d, err := fusedTime(st, 3, 20, func() error {
				if err := conv2.Forward(h, x, w, y2.Ptr(), ws, conv.WorkspaceSize()); err != nil {
					return err
				}
				blocks := min((n8+255)/256, int64(k.sms)*16)
				return act.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(blocks)}, Block: cu.Dim3{X: 256}, Stream: st},
					y2.Ptr(), y2.Ptr(), bias, int32(K2), n8, int32(0), float32(0), cu.DevicePtr(0), int32(0))
			})
			if err != nil {
				t.Fatal(err)
			}
			report("cuDNN conv 64->48 + bias pass", d, fl2)
		} else {
			t.Logf("cuDNN 64->48: %v (workspace %d)", err, conv.WorkspaceSize())
		}
		// y2 again holds the 64-channel reference for the variants below.
		if err := cudnnCall(); err != nil {
			t.Fatal(err)
		}
		if err := epi(); err != nil {
			t.Fatal(err)
		}
	}

	// Variants and probes (see fusedVariants), each timed and, unless a
	// probe, checked against cuDNN's result.
	for _, v := range fusedVariants() {
		slice, opts := fusedVariant(v)
		mod, _, err := fusedCompile(k.ctx, major, minor, slice, opts...)
		if err != nil {
			t.Errorf("variant %q: %v", v, err)
			continue
		}
		fn, err := fusedLoad(mod)
		if err != nil {
			t.Errorf("variant %q: %v", v, err)
			mod.Close()
			continue
		}
		f := fused(fn, fusedVariantThreads(opts), slice)
		d, err := fusedTime(st, 3, 20, f)
		if err != nil {
			t.Fatal(err)
		}
		extra := ""
		if !strings.Contains(v, "PROBE") {
			if err := st.Memset8(y, 0xff, ybytes); err != nil {
				t.Fatal(err)
			}
			if err := f(); err != nil {
				t.Fatal(err)
			}
			if err := st.CopyDtoH(cu.AsBytes(g1), y); err != nil {
				t.Fatal(err)
			}
			e := fusedRelDiff(g1, g2)
			extra = fmt.Sprintf(" (vs cuDNN + pass: %.3g)", e)
			if !(e < 3e-3) {
				t.Errorf("variant %q differs from cuDNN + pass by %.3g", v, e)
			}
		}
		report("variant "+v, d, flops)
		if extra != "" {
			t.Log(extra)
		}
		st.Synchronize()
		mod.Close()
	}
}

// fusedVariants returns the kernel variants to check and time, as NVRTC
// option sets, "slice:" before those of convslice.cu:
// FUSED_VARIANTS="-DA=1;slice:-DB=1 -DC=2", or by default every warp
// loading, 4 x 64-pixel tiles with 3 loader warps, the timing probes, and
// convslice.cu's default build and dense-block builds.
func fusedVariants() []string {
	v := os.Getenv("FUSED_VARIANTS")
	if v == "" {
		v = "-DCF_PRODUCER=0;-DCF_TM=64 -DCF_PRODUCER=3;-DCF_PROBE_NOLOAD=1;-DCF_PROBE_NOSTORE=1 -DCF_PROBE_NOLOAD=1;" +
			"slice:;slice:-DCF_TM=64 -DCF_FROWS=96;slice:" + strings.Join(sliceSource.Options, " ")
	}
	var out []string
	for _, s := range strings.Split(v, ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// fusedVariant splits a variant into its source (convslice.cu: slice) and
// options.
func fusedVariant(v string) (slice bool, opts []string) {
	v, slice = strings.CutPrefix(v, "slice:")
	return slice, strings.Fields(v)
}

// fusedVariantRows is a variant's filter rows (CF_FROWS).
func fusedVariantRows(opts []string) int {
	rows := 64
	for _, o := range opts {
		if n, ok := strings.CutPrefix(o, "-DCF_FROWS="); ok {
			fmt.Sscan(n, &rows)
		}
	}
	return rows
}

// fusedVariantThreads is a variant's block size.
func fusedVariantThreads(opts []string) int {
	ng, prod := 2, 2
	for _, o := range opts {
		if n, ok := strings.CutPrefix(o, "-DCF_NG="); ok {
			fmt.Sscan(n, &ng)
		}
		if n, ok := strings.CutPrefix(o, "-DCF_PRODUCER="); ok {
			fmt.Sscan(n, &prod)
		}
	}
	return fusedThreads(ng, prod)
}

func fusedRelDiff(a, b []uint16) float64 {
	var num, den float64
	for i := range a {
		x, y := float64(half.FromF16(a[i])), float64(half.FromF16(b[i]))
		num += (x - y) * (x - y)
		den += y * y
	}
	return math.Sqrt(num / den)
}

// TestSliceConvBench times realesrgan-x4plus's four dense-block
// convolutions (64, 96, 128 and 160 channels -> 32, leaky ReLU) on 4
// frames of 640x360: the fused kernel's dense-block builds reading
// prefixes of a 192-channel buffer and writing its slices, against cuDNN on
// contiguous tensors (without the bias pass and the concatenation copies
// the backend needs around it).
func TestSliceConvBench(t *testing.T) {
	k := fusedSetup(t)
	if testing.Short() {
		t.Skip("benchmark; not in -short")
	}
	const N, H, W, CS, K = 4, 360, 640, 192, 32
	st, err := k.ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	major, minor, err := k.ctx.Device().ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	h, err := cudnn.NewHandle(k.ctx)
	if err != nil {
		t.Skip("no cuDNN: ", err)
	}
	defer h.Close()
	if err := h.SetStream(st); err != nil {
		t.Fatal(err)
	}
	cache := cudnn.NewCache(h, cudnn.Options{})
	defer cache.Close()
	x, err := k.ctx.Alloc(N * H * W * CS * 2)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	if err := st.Memset8(x.Ptr(), 0x31, N*H*W*CS*2); err != nil { // 0x3131: 0.17
		t.Fatal(err)
	}
	wb, err := k.ctx.Alloc(K * 9 * 160 * 2)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Free()
	if err := st.Memset8(wb.Ptr(), 0x11, K*9*160*2); err != nil {
		t.Fatal(err)
	}
	type build struct {
		name    string
		fn      *cu.Function
		threads int
	}
	var builds []build
	for _, v := range []string{"-DCF_TM=64 -DCF_FROWS=96", "-DCF_TM=64 -DCF_FROWS=96 -DCF_NG=1"} {
		mod, _, err := fusedCompile(k.ctx, major, minor, true, strings.Fields(v)...)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		defer mod.Close()
		fn, err := fusedLoad(mod)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s", v, fnInfo(fn))
		builds = append(builds, build{v, fn, fusedVariantThreads(strings.Fields(v))})
	}
	var ws *cu.Buffer
	defer func() {
		if ws != nil {
			ws.Free()
		}
	}()
	for _, c := range []int{64, 96, 128, 160} {
		flops := 2.0 * N * H * W * K * 9 * float64(c)
		p := &fusedProblem{N: N, H: H, W: W, C: c, K: K, XS: CS, YS: CS, At: c, nslope: 1}
		for _, b := range builds {
			d, err := fusedTime(st, 3, 20, func() error {
				return fusedLaunch(b.fn, b.threads, k.sms, st, x.Ptr(), wb.Ptr(), 0, 0, x.Ptr(), p, true)
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d -> 32 of a 192-channel buffer, %-34s %7.1f us  %6.1f TFLOP/s", c, b.name, float64(d.Nanoseconds())/1e3, flops/d.Seconds()/1e12)
		}
		plan, err := cache.Get(cudnn.Shape{DType: cudnn.DataHalf, N: N, H: H, W: W, C: c, K: K, KH: 3, KW: 3, PadH: 1, PadW: 1})
		if err != nil {
			t.Fatal(err)
		}
		if n := plan.WorkspaceSize(); n > 0 && (ws == nil || ws.Size() < n) {
			if ws != nil {
				ws.Free()
			}
			if ws, err = k.ctx.Alloc(n); err != nil {
				t.Fatal(err)
			}
		}
		var wsp cu.DevicePtr
		if ws != nil {
			wsp = ws.Ptr()
		}
		y := x.Ptr().Add(N * H * W * 160 * 2) // contiguous input and output inside x
		d, err := fusedTime(st, 3, 20, func() error { return plan.Forward(h, x.Ptr(), wb.Ptr(), y, wsp, plan.WorkspaceSize()) })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d -> 32 contiguous, cuDNN (no bias pass)                  %7.1f us  %6.1f TFLOP/s", c, float64(d.Nanoseconds())/1e3, flops/d.Seconds()/1e12)
	}
}

package cpu

import (
	"fmt"
	"sync"
	"unsafe"
)

// Register-block shape of the GEMM microkernel: gemmMR rows of A by gemmNR
// columns of B. The AVX2/FMA kernel keeps the 6x16 tile of C in 12 YMM
// registers; the pure-Go fallback uses the same blocking.
const (
	gemmMR = 6
	gemmNR = 16
)

// packedB holds a k×n right-hand matrix repacked once (weights) into the
// panel layout the kernel reads.
//
// The n columns are split into ceil(n/gemmNR) panels of gemmNR columns; the
// last panel is zero-padded on the right. Panel q occupies
// data[q*k*gemmNR : (q+1)*k*gemmNR] and stores B[p][q*gemmNR+jj] at
// offset p*gemmNR+jj, so the kernel reads each panel strictly sequentially.
type packedB struct {
	k, n    int
	panels  int       // ceil(n / gemmNR)
	data    []float32 // panels * k * gemmNR floats, 32-byte aligned
	backing []float32 // allocation that data is carved from
}

// packB repacks row-major b (b[p*n+j], p<k, j<n) into panels.
func packB(k, n int, b []float32) *packedB {
	if k < 1 || n < 1 {
		panic(fmt.Sprintf("cpu: packB: invalid shape k=%d n=%d", k, n))
	}
	if len(b) < k*n {
		panic(fmt.Sprintf("cpu: packB: len(b)=%d < k*n=%d", len(b), k*n))
	}
	panels := (n + gemmNR - 1) / gemmNR
	backing, data := alignedFloats(panels * k * gemmNR)
	for q := 0; q < panels; q++ {
		j0 := q * gemmNR
		w := min(gemmNR, n-j0)
		panel := data[q*k*gemmNR : (q+1)*k*gemmNR]
		for p := 0; p < k; p++ {
			copy(panel[p*gemmNR:p*gemmNR+w], b[p*n+j0:p*n+j0+w])
		}
	}
	return &packedB{k: k, n: n, panels: panels, data: data, backing: backing}
}

// alignedFloats returns a zeroed slice of n floats whose first element is
// 64-byte aligned (cache-line), together with the backing allocation.
func alignedFloats(n int) (backing, s []float32) {
	backing = make([]float32, n+16)
	off := 0
	for uintptr(unsafe.Pointer(&backing[off]))%64 != 0 {
		off++
	}
	return backing, backing[off : off+n : off+n]
}

// gemmScratch is the per-call scratch used for the row tail (m not a multiple
// of gemmMR): the tail rows of A are copied into a zero-padded gemmMR×k block.
type gemmScratch struct {
	a []float32
}

var gemmScratchPool = sync.Pool{New: func() any { return new(gemmScratch) }}

// zeroBias is used when the caller passes a nil bias.
var zeroBias [gemmNR]float32

// gemm computes, for i<m and j<n:
//
//	c[i*ldc+j] = bias[j] + sum_{p<k} a[i*lda+p] * B[p][j]
//
// bias may be nil (then 0). The arithmetic for element (i,j) is: start from
// bias[j], then accumulate a[i][p]*B[p][j] for p = 0, 1, ..., k-1 in that
// order (with a fused multiply-add on the AVX2/FMA path). It does not depend
// on m or on which other rows are in the call, so any row of C is bitwise
// reproducible however the caller splits rows across calls/goroutines.
//
// Single goroutine; safe to call concurrently on disjoint c with a shared pb.
func gemm(m int, a []float32, lda int, pb *packedB, bias []float32, c []float32, ldc int) {
	if m <= 0 {
		return
	}
	k, n := pb.k, pb.n
	// Bounds checks up front: the kernels use raw pointers.
	if lda < 1 || ldc < 1 {
		panic(fmt.Sprintf("cpu: gemm: invalid lda=%d ldc=%d", lda, ldc))
	}
	if need := (m-1)*lda + k; len(a) < need {
		panic(fmt.Sprintf("cpu: gemm: len(a)=%d < %d (m=%d lda=%d k=%d)", len(a), need, m, lda, k))
	}
	if need := (m-1)*ldc + n; len(c) < need {
		panic(fmt.Sprintf("cpu: gemm: len(c)=%d < %d (m=%d ldc=%d n=%d)", len(c), need, m, ldc, n))
	}
	if bias != nil && len(bias) < n {
		panic(fmt.Sprintf("cpu: gemm: len(bias)=%d < n=%d", len(bias), n))
	}
	gemmBlocked(m, a, lda, pb, bias, c, ldc, useAsm)
}

// runKernel computes one full gemmMR×gemmNR tile with the selected kernel:
//
//	c[r*ldc+jj] = bias[jj] + sum_{p<k} a[r*lda+p] * panel[p*gemmNR+jj]
//
// for r<gemmMR, jj<gemmNR, reading exactly gemmMR rows of a (k floats each,
// stride lda), k*gemmNR floats of the panel b and gemmNR floats of bias, and
// writing gemmMR rows of gemmNR floats (stride ldc) of c. A direct call (not
// a func value) so that the stack tile in gemmBlocked does not escape.
func runKernel(asm bool, k int, a *float32, lda int, b *float32, c *float32, ldc int, bias *float32) {
	if asm {
		kernel6x16(k, a, lda, b, c, ldc, bias)
	} else {
		kernel6x16Go(k, a, lda, b, c, ldc, bias)
	}
}

func gemmBlocked(m int, a []float32, lda int, pb *packedB, bias []float32, c []float32, ldc int, asm bool) {
	k, n := pb.k, pb.n
	var (
		tile  [gemmMR * gemmNR]float32 // output tile for partial blocks
		btail [gemmNR]float32          // zero-padded bias for the last panel
		sc    *gemmScratch
	)
	fullPanels := n / gemmNR
	if bias != nil && fullPanels < pb.panels {
		copy(btail[:], bias[fullPanels*gemmNR:n])
	}
	for i0 := 0; i0 < m; i0 += gemmMR {
		rows := min(gemmMR, m-i0)
		ap, alda := &a[i0*lda], lda
		if rows < gemmMR {
			// Row tail: copy the remaining rows into a zero-padded
			// gemmMR×k block so they run through the same kernel.
			if sc == nil {
				sc = gemmScratchPool.Get().(*gemmScratch)
				if cap(sc.a) < gemmMR*k {
					sc.a = make([]float32, gemmMR*k)
				}
			}
			blk := sc.a[:gemmMR*k]
			for r := 0; r < gemmMR; r++ {
				dst := blk[r*k : (r+1)*k]
				if r < rows {
					copy(dst, a[(i0+r)*lda:(i0+r)*lda+k])
				} else {
					clear(dst)
				}
			}
			ap, alda = &blk[0], k
		}
		for q := 0; q < pb.panels; q++ {
			j0 := q * gemmNR
			cols := min(gemmNR, n-j0)
			bp := &pb.data[q*k*gemmNR]
			var biasp *float32
			switch {
			case bias == nil:
				biasp = &zeroBias[0]
			case cols == gemmNR:
				biasp = &bias[j0]
			default:
				biasp = &btail[0]
			}
			if rows == gemmMR && cols == gemmNR {
				runKernel(asm, k, ap, alda, bp, &c[i0*ldc+j0], ldc, biasp)
				continue
			}
			runKernel(asm, k, ap, alda, bp, &tile[0], gemmNR, biasp)
			for r := 0; r < rows; r++ {
				copy(c[(i0+r)*ldc+j0:(i0+r)*ldc+j0+cols], tile[r*gemmNR:r*gemmNR+cols])
			}
		}
	}
	if sc != nil {
		gemmScratchPool.Put(sc)
	}
}

// kernel6x16Go is the portable microkernel (same contract as kernel6x16).
// Each element is accumulated from its bias in increasing p order; the
// order never depends on the row, so it is deterministic per row.
func kernel6x16Go(k int, a *float32, lda int, b *float32, c *float32, ldc int, bias *float32) {
	bs := unsafe.Slice(b, k*gemmNR)
	bi := (*[gemmNR]float32)(unsafe.Pointer(bias))
	for r := 0; r < gemmMR; r++ {
		ar := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(a), uintptr(r*lda)*4)), k)
		c0, c1, c2, c3 := bi[0], bi[1], bi[2], bi[3]
		c4, c5, c6, c7 := bi[4], bi[5], bi[6], bi[7]
		c8, c9, c10, c11 := bi[8], bi[9], bi[10], bi[11]
		c12, c13, c14, c15 := bi[12], bi[13], bi[14], bi[15]
		for p, av := range ar {
			bp := (*[gemmNR]float32)(bs[p*gemmNR : p*gemmNR+gemmNR])
			c0 += av * bp[0]
			c1 += av * bp[1]
			c2 += av * bp[2]
			c3 += av * bp[3]
			c4 += av * bp[4]
			c5 += av * bp[5]
			c6 += av * bp[6]
			c7 += av * bp[7]
			c8 += av * bp[8]
			c9 += av * bp[9]
			c10 += av * bp[10]
			c11 += av * bp[11]
			c12 += av * bp[12]
			c13 += av * bp[13]
			c14 += av * bp[14]
			c15 += av * bp[15]
		}
		cr := (*[gemmNR]float32)(unsafe.Add(unsafe.Pointer(c), uintptr(r*ldc)*4))
		cr[0], cr[1], cr[2], cr[3] = c0, c1, c2, c3
		cr[4], cr[5], cr[6], cr[7] = c4, c5, c6, c7
		cr[8], cr[9], cr[10], cr[11] = c8, c9, c10, c11
		cr[12], cr[13], cr[14], cr[15] = c12, c13, c14, c15
	}
}

//go:build amd64 && !purego

package cpu

import xcpu "golang.org/x/sys/cpu"

// useAsm selects the AVX2/FMA microkernel. It is a variable so tests can
// force the pure-Go fallback. (x/sys/cpu already checks OS support for the
// YMM state.)
var useAsm = xcpu.X86.HasAVX2 && xcpu.X86.HasFMA

// kernel6x16 computes one 6×16 tile of C with AVX2/FMA (see runKernel for
// the contract). Implemented in gemm_amd64.s.
//
//go:noescape
func kernel6x16(k int, a *float32, lda int, b *float32, c *float32, ldc int, bias *float32)

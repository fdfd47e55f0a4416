// Package cublaslt binds cuBLASLt (libcublasLt.so.13, or .12) through
// purego: matrix multiplies of bf16 or fp16 inputs, or of float8 e4m3
// inputs with per-matrix or per-row/per-column scales, with fp32
// accumulation (CUBLAS_COMPUTE_32F) and bf16, fp16 or fp32 output, with
// the algorithm chosen once per shape by cublasLtMatmulAlgoGetHeuristic.
//
// # Layout convention (row-major)
//
// [Gemm.Matmul] serves row-major callers (Go slices, NHWC tensors):
//
//	D[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C[m×n]
//
// where every matrix is dense and row-major:
//   - A is stored m×k (row stride k) when transA is false, k×m (row
//     stride m) when it is true, and op(A) is A or Aᵀ accordingly;
//   - B is stored k×n (row stride n) when transB is false, n×k (row
//     stride k) when it is true;
//   - C and D are m×n with row stride n. C may be D (accumulate in place)
//     or 0 when beta is 0.
//
// cuBLASLt itself is column-major. A row-major X is the column-major Xᵀ
// with the same memory, so the package computes Dᵀ = op(B)ᵀ·op(A)ᵀ: it
// passes B as cuBLASLt's first operand and A as its second, with m and n
// swapped. Callers never see this.
//
// An NHWC 1×1 convolution with weights w[K][C] is
// Matmul(A=x (M=N·H·W rows × C), B=w, transB=true, m=N·H·W, n=K, k=C).
//
// # Threads and contexts
//
// As in package cudnn, calls make the handle's CUDA context current on the
// calling thread for their duration; a Handle is safe for use by one
// goroutine at a time (give concurrent streams their own Gemm).
package cublaslt

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/nvidia/dl"
)

var lib struct {
	l *dl.Library

	cublasLtCreate                       func(h *uintptr) int32
	cublasLtDestroy                      func(h uintptr) int32
	cublasLtGetVersion                   func() uintptr
	cublasLtGetStatusName                func(s int32) string
	cublasLtGetStatusString              func(s int32) string
	cublasLtMatmulDescCreate             func(d *uintptr, compute, scale int32) int32
	cublasLtMatmulDescDestroy            func(d uintptr) int32
	cublasLtMatmulDescSetAttribute       func(d uintptr, attr int32, buf unsafe.Pointer, size uintptr) int32
	cublasLtMatrixLayoutCreate           func(l *uintptr, dtype int32, rows, cols uint64, ld int64) int32
	cublasLtMatrixLayoutDestroy          func(l uintptr) int32
	cublasLtMatrixLayoutSetAttribute     func(l uintptr, attr int32, buf unsafe.Pointer, size uintptr) int32
	cublasLtMatmulPreferenceCreate       func(p *uintptr) int32
	cublasLtMatmulPreferenceDestroy      func(p uintptr) int32
	cublasLtMatmulPreferenceSetAttribute func(p uintptr, attr int32, buf unsafe.Pointer, size uintptr) int32
	cublasLtMatmulAlgoGetHeuristic       func(h, desc, a, b, c, d, pref uintptr, requested int32, results unsafe.Pointer, returned *int32) int32
	cublasLtMatmul                       func(h, desc uintptr, alpha unsafe.Pointer, A, Adesc, B, Bdesc uintptr, beta unsafe.Pointer, C, Cdesc, D, Ddesc uintptr, algo unsafe.Pointer, ws, wsSize, stream uintptr) int32
}

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens libcublasLt (dl.CUBLASLT: .so.13, then .so.12) and binds its
// functions. It returns the same result every time; a missing library is a
// *dl.NotFoundError listing the places searched.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

func load() error {
	l, err := dl.Load(dl.CUBLASLT)
	if err != nil {
		return err
	}
	b := l.Binder()
	b.Bind(&lib.cublasLtCreate, "cublasLtCreate")
	b.Bind(&lib.cublasLtDestroy, "cublasLtDestroy")
	b.Bind(&lib.cublasLtGetVersion, "cublasLtGetVersion")
	b.Bind(&lib.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate")
	b.Bind(&lib.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy")
	b.Bind(&lib.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute")
	b.Bind(&lib.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate")
	b.Bind(&lib.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy")
	b.Bind(&lib.cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute")
	b.Bind(&lib.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate")
	b.Bind(&lib.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy")
	b.Bind(&lib.cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute")
	b.Bind(&lib.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic")
	b.Bind(&lib.cublasLtMatmul, "cublasLtMatmul")
	if err := b.Err(); err != nil {
		return fmt.Errorf("cublaslt: %s lacks a function vsr needs: %w", l.Path, err)
	}
	b.Optional(&lib.cublasLtGetStatusName, "cublasLtGetStatusName")
	b.Optional(&lib.cublasLtGetStatusString, "cublasLtGetStatusString")
	lib.l = l
	return nil
}

// LibraryPath returns where libcublasLt was loaded from ("" before Load).
func LibraryPath() string {
	if lib.l == nil {
		return ""
	}
	return lib.l.Path
}

// Version returns cublasLtGetVersion(): major*10000 + minor*100 + patch
// (130100 for 13.1.0).
func Version() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	return int(lib.cublasLtGetVersion()), nil
}

// VersionString formats a cuBLASLt version number (130100) as "13.1.0".
func VersionString(v int) string {
	return dl.VersionString(v)
}

// Handle is a cublasLtHandle_t bound to a CUDA context.
type Handle struct {
	h   uintptr
	ctx *cuda.Context

	mu     sync.Mutex
	closed bool
}

// NewHandle loads cuBLASLt and creates a handle (cublasLtCreate) in ctx.
// A nil ctx leaves the context to the caller, who must keep one current on
// the calling thread; NewGemm then needs a caller-owned workspace.
func NewHandle(ctx *cuda.Context) (*Handle, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	h := &Handle{ctx: ctx}
	if err := h.ctx.Do(func() error { return check("cublasLtCreate", lib.cublasLtCreate(&h.h)) }); err != nil {
		return nil, err
	}
	return h, nil
}

// Context returns the handle's context (nil if none was given).
func (h *Handle) Context() *cuda.Context { return h.ctx }

// Raw returns the cublasLtHandle_t.
func (h *Handle) Raw() uintptr { return h.h }

var errClosed = errors.New("cublaslt: handle is closed")

func (h *Handle) do(f func() error) error {
	if h == nil || h.h == 0 {
		return errClosed
	}
	return h.ctx.Do(f)
}

// Close destroys the handle (cublasLtDestroy). It is idempotent.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.h == 0 {
		return nil
	}
	h.closed = true
	err := h.ctx.Do(func() error { return check("cublasLtDestroy", lib.cublasLtDestroy(h.h)) })
	h.h = 0
	return err
}

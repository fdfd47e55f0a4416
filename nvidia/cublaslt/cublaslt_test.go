package cublaslt

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// Values from library_types.h, cublas_api.h and cublasLt.h.
func TestConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"CUDA_R_32F", int64(R32F), 0},
		{"CUDA_R_64F", int64(R64F), 1},
		{"CUDA_R_16F", int64(R16F), 2},
		{"CUDA_R_8I", int64(R8I), 3},
		{"CUDA_R_32I", int64(R32I), 10},
		{"CUDA_R_16BF", int64(R16BF), 14},
		{"CUDA_R_8F_E4M3", int64(R8F_E4M3), 28},
		{"CUBLAS_COMPUTE_16F", int64(Compute16F), 64},
		{"CUBLAS_COMPUTE_32F", int64(Compute32F), 68},
		{"CUBLAS_COMPUTE_32F_PEDANTIC", int64(Compute32FPedantic), 69},
		{"CUBLAS_COMPUTE_64F", int64(Compute64F), 70},
		{"CUBLAS_COMPUTE_32I", int64(Compute32I), 72},
		{"CUBLAS_COMPUTE_32F_FAST_16F", int64(Compute32FFast16F), 74},
		{"CUBLAS_COMPUTE_32F_FAST_16BF", int64(Compute32FFast16BF), 75},
		{"CUBLAS_COMPUTE_32F_FAST_TF32", int64(Compute32FFastTF32), 77},
		{"CUBLAS_OP_N", int64(OpN), 0},
		{"CUBLAS_OP_T", int64(OpT), 1},
		{"CUBLAS_OP_C", int64(OpC), 2},
		{"CUBLASLT_ORDER_COL", int64(OrderCol), 0},
		{"CUBLASLT_ORDER_ROW", int64(OrderRow), 1},
		{"CUBLASLT_EPILOGUE_DEFAULT", int64(EpilogueDefault), 1},
		{"CUBLASLT_EPILOGUE_BIAS", int64(EpilogueBias), 4},
		{"CUBLASLT_EPILOGUE_RELU_BIAS", int64(EpilogueReLUBias), 6},
		{"CUBLASLT_MATMUL_DESC_COMPUTE_TYPE", int64(descComputeType), 0},
		{"CUBLASLT_MATMUL_DESC_SCALE_TYPE", int64(descScaleType), 1},
		{"CUBLASLT_MATMUL_DESC_POINTER_MODE", int64(descPointerMode), 2},
		{"CUBLASLT_MATMUL_DESC_TRANSA", int64(descTransA), 3},
		{"CUBLASLT_MATMUL_DESC_TRANSB", int64(descTransB), 4},
		{"CUBLASLT_MATMUL_DESC_EPILOGUE", int64(descEpilogue), 7},
		{"CUBLASLT_MATMUL_DESC_BIAS_POINTER", int64(descBiasPointer), 8},
		{"CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE", int64(descBiasDataType), 26},
		{"CUBLASLT_MATRIX_LAYOUT_TYPE", int64(layoutType), 0},
		{"CUBLASLT_MATRIX_LAYOUT_ORDER", int64(layoutOrder), 1},
		{"CUBLASLT_MATRIX_LAYOUT_LD", int64(layoutLD), 4},
		{"CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT", int64(layoutBatchCount), 5},
		{"CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET", int64(layoutStridedBatchOffset), 6},
		{"CUBLASLT_MATMUL_PREF_SEARCH_MODE", int64(prefSearchMode), 0},
		{"CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES", int64(prefMaxWorkspaceBytes), 1},
		{"CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES", int64(prefMinAlignmentA), 5},
		{"CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES", int64(prefMinAlignmentD), 8},
		{"CUBLAS_STATUS_SUCCESS", int64(StatusSuccess), 0},
		{"CUBLAS_STATUS_NOT_INITIALIZED", int64(StatusNotInitialized), 1},
		{"CUBLAS_STATUS_ALLOC_FAILED", int64(StatusAllocFailed), 3},
		{"CUBLAS_STATUS_INVALID_VALUE", int64(StatusInvalidValue), 7},
		{"CUBLAS_STATUS_ARCH_MISMATCH", int64(StatusArchMismatch), 8},
		{"CUBLAS_STATUS_EXECUTION_FAILED", int64(StatusExecutionFailed), 13},
		{"CUBLAS_STATUS_INTERNAL_ERROR", int64(StatusInternalError), 14},
		{"CUBLAS_STATUS_NOT_SUPPORTED", int64(StatusNotSupported), 15},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if R16BF.Size() != 2 || R32F.Size() != 4 || R16BF.String() != "bf16" {
		t.Error("DataType helpers")
	}
}

// cublasLtMatmulHeuristicResult_t: {cublasLtMatmulAlgo_t algo (8 uint64);
// size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4];}.
func TestHeuristicResultLayout(t *testing.T) {
	var r heuristicResult
	if s := unsafe.Sizeof(r); s != 96 {
		t.Errorf("sizeof = %d, want 96", s)
	}
	if o := unsafe.Offsetof(r.workspaceSize); o != 64 {
		t.Errorf("offsetof(workspaceSize) = %d", o)
	}
	if o := unsafe.Offsetof(r.state); o != 72 {
		t.Errorf("offsetof(state) = %d", o)
	}
	if o := unsafe.Offsetof(r.wavesCount); o != 76 {
		t.Errorf("offsetof(wavesCount) = %d", o)
	}
}

func TestShape(t *testing.T) {
	s := Shape{M: 257, N: 129, K: 520, TransB: true}
	if s.String() != "m257 n129 k520 NT" {
		t.Errorf("String = %q", s)
	}
	if s.Validate() != nil || (Shape{M: 0, N: 1, K: 1}).Validate() == nil {
		t.Error("Validate")
	}
	m := map[Shape]bool{s: true}
	if !m[Shape{M: 257, N: 129, K: 520, TransB: true}] || m[Shape{M: 257, N: 129, K: 520}] {
		t.Error("Shape as key")
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Op: "cublasLtMatmul", Code: StatusInvalidValue, Name: "CUBLAS_STATUS_INVALID_VALUE", Msg: "an invalid value was used as an argument"}
	if got := e.Error(); got != "cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE (7): an invalid value was used as an argument" {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(e, ErrInvalidValue) || errors.Is(e, ErrNotSupported) {
		t.Error("errors.Is")
	}
	if lib.cublasLtGetStatusName == nil {
		if (&Error{Op: "x", Code: 15}).Error() != "x: CUBLAS_STATUS_NOT_SUPPORTED (15)" {
			t.Errorf("fallback: %q", (&Error{Op: "x", Code: 15}).Error())
		}
	}
	if check("x", 0) != nil {
		t.Error("check(0)")
	}
	if VersionString(130100) != "13.1.0" || VersionString(120804) != "12.8.4" {
		t.Error("VersionString")
	}
}

func TestLoad(t *testing.T) {
	err := Load()
	if err != nil {
		if !errors.Is(err, dl.ErrNotFound) {
			t.Fatalf("Load: %v (not a not-found error)", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "libcublasLt not found (searched: loader(libcublasLt.so.13, libcublasLt.so.12") {
			t.Errorf("not-found message: %q", msg)
		}
		t.Logf("no cuBLASLt here (expected without a GPU): %v", err)
		if _, err := NewHandle(nil); err == nil {
			t.Error("NewHandle without the library succeeded")
		}
		return
	}
	v, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cuBLASLt %s (%d) from %s", VersionString(v), v, LibraryPath())
	if v < 110000 {
		t.Errorf("cublasLtGetVersion = %d", v)
	}
}

// emulate runs cuBLASLt's column-major semantics on the CPU:
// D(i,j) = Σp opA(i,p)·opB(p,j), X(r,c) at X[r + c·ld].
func emulate(cm colMajorCall, A, B []float64, k int) []float64 {
	m, n := cm.c.rows, cm.c.cols
	at := func(x []float64, l layout, op Operation, i, j int) float64 {
		if op == OpT {
			i, j = j, i
		}
		return x[i+j*l.ld]
	}
	D := make([]float64, cm.c.ld*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			acc := 0.0
			for p := 0; p < k; p++ {
				acc += at(A, cm.a, cm.opA, i, p) * at(B, cm.b, cm.opB, p, j)
			}
			D[i+j*cm.c.ld] = acc
		}
	}
	return D
}

// The row-major to column-major mapping, checked without a GPU: cuBLASLt's
// semantics emulated on the caller's buffers (B as its A, A as its B) give
// the row-major product.
func TestColMajorMapping(t *testing.T) {
	const m, n, k = 5, 3, 4
	a, b := make([]float64, m*k), make([]float64, k*n)
	for i := range a {
		a[i] = float64(i%7) - 3
	}
	for i := range b {
		b[i] = float64(i%5)*0.5 - 1
	}
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			s := Shape{M: m, N: n, K: k, TransA: ta, TransB: tb}
			cm := s.colMajor()
			if cm.a.ld < cm.a.rows || cm.b.ld < cm.b.rows || cm.c.rows != n || cm.c.cols != m {
				t.Fatalf("%v: bad layouts %+v", s, cm)
			}
			got := emulate(cm, b, a, k)
			want := refGemm(a, b, nil, m, n, k, ta, tb, 1, 0)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%v: D[%d] = %g, want %g", s, i, got[i], want[i])
				}
			}
		}
	}
}

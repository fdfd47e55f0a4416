package cudnn

import (
	"github.com/vsr-dev/vsr/tensor/half"

	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// The values are cuDNN 9's (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h).
func TestConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int32
	}{
		{"CUDNN_DATA_FLOAT", int32(DataFloat), 0},
		{"CUDNN_DATA_DOUBLE", int32(DataDouble), 1},
		{"CUDNN_DATA_HALF", int32(DataHalf), 2},
		{"CUDNN_DATA_INT8", int32(DataInt8), 3},
		{"CUDNN_DATA_INT32", int32(DataInt32), 4},
		{"CUDNN_DATA_UINT8", int32(DataUint8), 6},
		{"CUDNN_DATA_BFLOAT16", int32(DataBFloat16), 9},
		{"CUDNN_DATA_FP8_E4M3", int32(DataFP8E4M3), 12},
		{"CUDNN_TENSOR_NCHW", int32(TensorNCHW), 0},
		{"CUDNN_TENSOR_NHWC", int32(TensorNHWC), 1},
		{"CUDNN_TENSOR_NCHW_VECT_C", int32(TensorNCHWVectC), 2},
		{"CUDNN_DEFAULT_MATH", int32(DefaultMath), 0},
		{"CUDNN_TENSOR_OP_MATH", int32(TensorOpMath), 1},
		{"CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION", int32(TensorOpMathAllowConversion), 2},
		{"CUDNN_FMA_MATH", int32(FMAMath), 3},
		{"CUDNN_CONVOLUTION", int32(Convolution), 0},
		{"CUDNN_CROSS_CORRELATION", int32(CrossCorrelation), 1},
		{"CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM", int32(AlgoImplicitGemm), 0},
		{"CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM", int32(AlgoImplicitPrecompGemm), 1},
		{"CUDNN_CONVOLUTION_FWD_ALGO_GEMM", int32(AlgoGemm), 2},
		{"CUDNN_CONVOLUTION_FWD_ALGO_DIRECT", int32(AlgoDirect), 3},
		{"CUDNN_CONVOLUTION_FWD_ALGO_FFT", int32(AlgoFFT), 4},
		{"CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING", int32(AlgoFFTTiling), 5},
		{"CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD", int32(AlgoWinograd), 6},
		{"CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED", int32(AlgoWinogradNonfused), 7},
		{"CUDNN_CONVOLUTION_FWD_ALGO_COUNT", int32(AlgoCount), 8},
		{"CUDNN_NON_DETERMINISTIC", int32(NonDeterministic), 0},
		{"CUDNN_DETERMINISTIC", int32(Deterministic), 1},
		{"CUDNN_ACTIVATION_RELU", int32(ActivationReLU), 1},
		{"CUDNN_ACTIVATION_IDENTITY", int32(ActivationIdentity), 5},
		{"CUDNN_STATUS_SUCCESS", int32(StatusSuccess), 0},
		{"CUDNN_STATUS_NOT_INITIALIZED", int32(StatusNotInitialized), 1001},
		{"CUDNN_STATUS_BAD_PARAM", int32(StatusBadParam), 2000},
		{"CUDNN_STATUS_NOT_SUPPORTED", int32(StatusNotSupported), 3000},
		{"CUDNN_STATUS_INTERNAL_ERROR", int32(StatusInternalError), 4000},
		{"CUDNN_STATUS_EXECUTION_FAILED", int32(StatusExecutionFailed), 5000},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if AlgoImplicitPrecompGemm.String() != "IMPLICIT_PRECOMP_GEMM" || FwdAlgo(42).String() != "FwdAlgo(42)" {
		t.Error("FwdAlgo.String")
	}
	if DataHalf.Size() != 2 || DataBFloat16.Size() != 2 || DataFloat.Size() != 4 {
		t.Error("DataType.Size")
	}
}

// cudnnConvolutionFwdAlgoPerf_t: {int algo; int status; float time;
// size_t memory; int determinism; int mathType; int reserved[3];}.
func TestPerfLayout(t *testing.T) {
	var p algoPerf
	if s := unsafe.Sizeof(p); s != 48 {
		t.Errorf("sizeof(algoPerf) = %d, want 48", s)
	}
	if o := unsafe.Offsetof(p.memory); o != 16 {
		t.Errorf("offsetof(memory) = %d, want 16", o)
	}
	if o := unsafe.Offsetof(p.mathType); o != 28 {
		t.Errorf("offsetof(mathType) = %d, want 28", o)
	}
}

func TestShape(t *testing.T) {
	s := Shape{DType: DataHalf, N: 2, H: 37, W: 37, C: 64, K: 48, KH: 3, KW: 3, PadH: 1, PadW: 1}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if ho, wo := s.OutHW(); ho != 37 || wo != 37 {
		t.Errorf("OutHW = %d,%d", ho, wo)
	}
	if got := s.String(); got != "f16 n2 37x37x64 -> k48 3x3 p1,1 s1,1 d1,1" {
		t.Errorf("String = %q", got)
	}
	n := s.Normalized()
	if n.StrideH != 1 || n.DilationW != 1 {
		t.Error("Normalized")
	}
	m := map[Shape]int{n: 1}
	if m[s.Normalized()] != 1 {
		t.Error("normalized shapes are not equal keys")
	}
	if s.XBytes() != 2*37*37*64*2 || s.WBytes() != 48*9*64*2 || s.YBytes() != 2*37*37*48*2 {
		t.Error("byte sizes")
	}
	st := Shape{DType: DataBFloat16, N: 1, H: 10, W: 9, C: 3, K: 8, KH: 3, KW: 3, PadH: 0, PadW: 1, StrideH: 2, StrideW: 2, DilationH: 2}
	if ho, wo := st.OutHW(); ho != 3 || wo != 5 {
		t.Errorf("strided OutHW = %d,%d want 3,5", ho, wo)
	}
	for _, bad := range []Shape{
		{DType: DataDouble, N: 1, H: 1, W: 1, C: 1, K: 1, KH: 1, KW: 1},
		{DType: DataHalf, N: 0, H: 1, W: 1, C: 1, K: 1, KH: 1, KW: 1},
		{DType: DataHalf, N: 1, H: 2, W: 2, C: 1, K: 1, KH: 3, KW: 3},
		{DType: DataHalf, N: 1, H: 4, W: 4, C: 1, K: 1, KH: 3, KW: 3, PadH: -1},
	} {
		if bad.Validate() == nil {
			t.Errorf("Validate(%v) = nil", bad)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Op: "cudnnConvolutionForward", Code: StatusBadParam, Name: "CUDNN_STATUS_BAD_PARAM", Detail: "bad x"}
	if got := e.Error(); got != "cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM (2000): bad x" {
		t.Errorf("Error() = %q", got)
	}
	e2 := &Error{Op: "cudnnX", Code: 2002}
	if !strings.Contains(e2.Error(), "CUDNN_STATUS_BAD_PARAM_NULL_POINTER (2002)") {
		t.Errorf("fallback name: %q", e2)
	}
	if !errors.Is(e2, ErrBadParam) || errors.Is(e2, ErrNotSupported) {
		t.Error("errors.Is by category")
	}
	if !errors.Is(&Error{Code: 3002}, ErrNotSupported) {
		t.Error("NOT_SUPPORTED_SHAPE is not NOT_SUPPORTED")
	}
	if Status(7777).Name() != "CUDNN_STATUS_UNKNOWN" && lib.cudnnGetErrorString == nil {
		t.Error("unknown status name")
	}
	if check("x", 0) != nil {
		t.Error("check(0)")
	}
	if oneLine("a\n  b\tc ") != "a b c" {
		t.Errorf("oneLine = %q", oneLine("a\n  b\tc "))
	}
	if VersionString(91400) != "9.14.0" || VersionString(90100) != "9.1.0" {
		t.Error("VersionString")
	}
}

// Without cuDNN the error names the library and lists where it looked;
// with it, the version is 9.x.
func TestLoad(t *testing.T) {
	err := Load()
	if err != nil {
		if !errors.Is(err, dl.ErrNotFound) {
			t.Fatalf("Load: %v (not a not-found error)", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "libcudnn not found (searched: loader(libcudnn.so.9") || strings.Contains(msg, "\n") {
			t.Errorf("not-found message: %q", msg)
		}
		t.Logf("no cuDNN here (expected without a GPU): %v", err)
		if _, err := NewHandle(nil); err == nil {
			t.Error("NewHandle without the library succeeded")
		}
		if HasBiasActivation() {
			t.Error("HasBiasActivation without the library")
		}
		return
	}
	v, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cuDNN %s (%d) from %s, bias+activation: %v", VersionString(v), v, LibraryPath(), HasBiasActivation())
	if v < 90000 || v >= 100000 {
		t.Errorf("cudnnGetVersion = %d, want 9.x", v)
	}
}

func TestHalfConversions(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {5.960464477539063e-08, 0x0001}, {0.333251953125, 0x3555},
	} {
		if got := half.ToF16(c.f); got != c.h {
			t.Errorf("half.ToF16(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
		if c.h != 0x7c00 {
			if back := half.FromF16(c.h); back != c.f {
				t.Errorf("half.FromF16(%#04x) = %g, want %g", c.h, back, c.f)
			}
		}
	}
	// Round to nearest even: 1 + 2^-11 is halfway between 1 and 1+2^-10.
	if got := half.ToF16(1 + 1.0/2048); got != 0x3c00 {
		t.Errorf("tie rounding = %#04x", got)
	}
	if got := half.ToBF16(1); got != 0x3f80 {
		t.Errorf("half.ToBF16(1) = %#04x", got)
	}
	if got := half.FromBF16(half.ToBF16(3.14159)); math.Abs(float64(got)-3.14159) > 0.01 {
		t.Errorf("bf16 round trip = %g", got)
	}
}

func TestCPUReference(t *testing.T) {
	// A 1x1 convolution is a matrix product; a 3x3 one with a centred
	// delta filter is the identity.
	s := Shape{DType: DataFloat, N: 1, H: 3, W: 4, C: 2, K: 2, KH: 3, KW: 3, PadH: 1, PadW: 1}
	x := make([]float64, s.XElems())
	for i := range x {
		x[i] = float64(i)
	}
	w := make([]float64, s.WElems())
	// w[k][1][1][c] = 1 if k == c.
	for k := 0; k < 2; k++ {
		w[((k*3+1)*3+1)*2+k] = 1
	}
	y := convRef(s, x, w, nil)
	for i := range y {
		if y[i] != x[i] {
			t.Fatalf("identity conv: y[%d] = %g, want %g", i, y[i], x[i])
		}
	}
}

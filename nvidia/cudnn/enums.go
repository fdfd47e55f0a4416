package cudnn

import "fmt"

// The enum values below are cuDNN 9's, from cudnn_graph.h (status, data
// type, math type, tensor format, convolution mode, activation mode),
// cudnn_ops.h (forward algorithms, determinism) and cudnn_cnn.h.

// DataType is a cudnnDataType_t.
type DataType int32

// cudnnDataType_t values.
const (
	DataFloat    DataType = 0 // CUDNN_DATA_FLOAT
	DataDouble   DataType = 1 // CUDNN_DATA_DOUBLE
	DataHalf     DataType = 2 // CUDNN_DATA_HALF
	DataInt8     DataType = 3 // CUDNN_DATA_INT8
	DataInt32    DataType = 4 // CUDNN_DATA_INT32
	DataUint8    DataType = 6 // CUDNN_DATA_UINT8
	DataBFloat16 DataType = 9 // CUDNN_DATA_BFLOAT16
	DataInt64    DataType = 10
	DataBoolean  DataType = 11
	DataFP8E4M3  DataType = 12
	DataFP8E5M2  DataType = 13
)

// Size returns the element size in bytes (0 for types this package does not
// size).
func (d DataType) Size() int {
	switch d {
	case DataHalf, DataBFloat16:
		return 2
	case DataFloat, DataInt32:
		return 4
	case DataDouble, DataInt64:
		return 8
	case DataInt8, DataUint8, DataBoolean, DataFP8E4M3, DataFP8E5M2:
		return 1
	}
	return 0
}

func (d DataType) String() string {
	switch d {
	case DataFloat:
		return "f32"
	case DataDouble:
		return "f64"
	case DataHalf:
		return "f16"
	case DataBFloat16:
		return "bf16"
	case DataInt8:
		return "i8"
	case DataInt32:
		return "i32"
	case DataUint8:
		return "u8"
	case DataInt64:
		return "i64"
	case DataBoolean:
		return "bool"
	case DataFP8E4M3:
		return "fp8e4m3"
	case DataFP8E5M2:
		return "fp8e5m2"
	}
	return fmt.Sprintf("DataType(%d)", int32(d))
}

// TensorFormat is a cudnnTensorFormat_t.
type TensorFormat int32

// cudnnTensorFormat_t values.
const (
	TensorNCHW      TensorFormat = 0 // CUDNN_TENSOR_NCHW
	TensorNHWC      TensorFormat = 1 // CUDNN_TENSOR_NHWC; for filters: KRSC
	TensorNCHWVectC TensorFormat = 2 // CUDNN_TENSOR_NCHW_VECT_C
)

// MathType is a cudnnMathType_t.
type MathType int32

// cudnnMathType_t values.
const (
	DefaultMath                 MathType = 0 // CUDNN_DEFAULT_MATH
	TensorOpMath                MathType = 1 // CUDNN_TENSOR_OP_MATH
	TensorOpMathAllowConversion MathType = 2 // CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
	FMAMath                     MathType = 3 // CUDNN_FMA_MATH
)

func (m MathType) String() string {
	switch m {
	case DefaultMath:
		return "DEFAULT_MATH"
	case TensorOpMath:
		return "TENSOR_OP_MATH"
	case TensorOpMathAllowConversion:
		return "TENSOR_OP_MATH_ALLOW_CONVERSION"
	case FMAMath:
		return "FMA_MATH"
	}
	return fmt.Sprintf("MathType(%d)", int32(m))
}

// ConvMode is a cudnnConvolutionMode_t.
type ConvMode int32

// cudnnConvolutionMode_t values.
const (
	Convolution      ConvMode = 0 // CUDNN_CONVOLUTION (flipped filter)
	CrossCorrelation ConvMode = 1 // CUDNN_CROSS_CORRELATION
)

// FwdAlgo is a cudnnConvolutionFwdAlgo_t.
type FwdAlgo int32

// cudnnConvolutionFwdAlgo_t values.
const (
	AlgoImplicitGemm        FwdAlgo = 0 // CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
	AlgoImplicitPrecompGemm FwdAlgo = 1 // CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
	AlgoGemm                FwdAlgo = 2 // CUDNN_CONVOLUTION_FWD_ALGO_GEMM
	AlgoDirect              FwdAlgo = 3 // CUDNN_CONVOLUTION_FWD_ALGO_DIRECT
	AlgoFFT                 FwdAlgo = 4 // CUDNN_CONVOLUTION_FWD_ALGO_FFT
	AlgoFFTTiling           FwdAlgo = 5 // CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING
	AlgoWinograd            FwdAlgo = 6 // CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD
	AlgoWinogradNonfused    FwdAlgo = 7 // CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED
	AlgoCount               FwdAlgo = 8 // CUDNN_CONVOLUTION_FWD_ALGO_COUNT
)

var algoNames = [...]string{
	"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
	"FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED",
}

func (a FwdAlgo) String() string {
	if a >= 0 && int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("FwdAlgo(%d)", int32(a))
}

// Determinism is a cudnnDeterminism_t.
type Determinism int32

// cudnnDeterminism_t values.
const (
	NonDeterministic Determinism = 0 // CUDNN_NON_DETERMINISTIC
	Deterministic    Determinism = 1 // CUDNN_DETERMINISTIC
)

// ActivationMode is a cudnnActivationMode_t.
type ActivationMode int32

// cudnnActivationMode_t values.
const (
	ActivationSigmoid     ActivationMode = 0
	ActivationReLU        ActivationMode = 1
	ActivationTanh        ActivationMode = 2
	ActivationClippedReLU ActivationMode = 3
	ActivationELU         ActivationMode = 4
	ActivationIdentity    ActivationMode = 5
	ActivationSwish       ActivationMode = 6
)

// NaN propagation (cudnnNanPropagation_t).
const (
	notPropagateNaN int32 = 0
	propagateNaN    int32 = 1
)

// Status is a cudnnStatus_t.
type Status int32

// cudnnStatus_t values that callers test for (cuDNN 9 numbering: the
// thousands digit is the category).
const (
	StatusSuccess                 Status = 0
	StatusNotInitialized          Status = 1001
	StatusSublibraryVersionMism   Status = 1002
	StatusLicenseError            Status = 1005
	StatusSublibraryLoadingFailed Status = 1008
	StatusBadParam                Status = 2000
	StatusBadParamNullPointer     Status = 2002
	StatusBadParamMisaligned      Status = 2003
	StatusBadParamShapeMismatch   Status = 2008
	StatusNotSupported            Status = 3000
	StatusNotSupportedShape       Status = 3002
	StatusNotSupportedDataType    Status = 3003
	StatusNotSupportedLayout      Status = 3004
	StatusNotSupportedArchMism    Status = 3007
	StatusInternalError           Status = 4000
	StatusHostAllocationFailed    Status = 4003
	StatusDeviceAllocationFailed  Status = 4004
	StatusExecutionFailed         Status = 5000
	StatusExecutionFailedDriver   Status = 5001
	StatusExecutionFailedCudart   Status = 5003
)

var statusNames = map[Status]string{
	0:    "CUDNN_STATUS_SUCCESS",
	1001: "CUDNN_STATUS_NOT_INITIALIZED",
	1002: "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
	1003: "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH",
	1004: "CUDNN_STATUS_DEPRECATED",
	1005: "CUDNN_STATUS_LICENSE_ERROR",
	1006: "CUDNN_STATUS_RUNTIME_IN_PROGRESS",
	1007: "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
	1008: "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
	2000: "CUDNN_STATUS_BAD_PARAM",
	2001: "CUDNN_STATUS_INVALID_VALUE",
	2002: "CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
	2003: "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER",
	2004: "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED",
	2005: "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND",
	2006: "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT",
	2007: "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH",
	2008: "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH",
	2009: "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES",
	2010: "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE",
	2011: "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH",
	2012: "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE",
	3000: "CUDNN_STATUS_NOT_SUPPORTED",
	3001: "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
	3002: "CUDNN_STATUS_NOT_SUPPORTED_SHAPE",
	3003: "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE",
	3004: "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT",
	3005: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER",
	3006: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART",
	3007: "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
	3008: "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
	3009: "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE",
	3010: "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT",
	3011: "CUDNN_STATUS_NOT_SUPPORTED_PADDING",
	3012: "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM",
	3013: "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API",
	4000: "CUDNN_STATUS_INTERNAL_ERROR",
	4001: "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED",
	4002: "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE",
	4003: "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
	4004: "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
	4005: "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM",
	4006: "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
	5000: "CUDNN_STATUS_EXECUTION_FAILED",
	5001: "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
	5002: "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS",
	5003: "CUDNN_STATUS_EXECUTION_FAILED_CUDART",
	5004: "CUDNN_STATUS_EXECUTION_FAILED_CURAND",
}

// Name returns the status's enum name: cudnnGetErrorString's text when the
// library is loaded, else a built-in table of cuDNN 9 codes.
func (s Status) Name() string {
	if lib.cudnnGetErrorString != nil {
		if n := lib.cudnnGetErrorString(int32(s)); n != "" {
			return n
		}
	}
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "CUDNN_STATUS_UNKNOWN"
}

// Category returns the status rounded down to its category (2000 for every
// BAD_PARAM variant, 3000 for NOT_SUPPORTED, ...).
func (s Status) Category() Status { return s / 1000 * 1000 }

// Error is a failed cuDNN call.
type Error struct {
	// Op is the cuDNN function, e.g. "cudnnConvolutionForward".
	Op string
	// Code is the cudnnStatus_t.
	Code Status
	// Name is cudnnGetErrorString's text (the enum name).
	Name string
	// Detail is cudnnGetLastErrorString's message, when there is one.
	Detail string
}

// Error formats as "cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM (2000): detail".
func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.Name()
	}
	s := fmt.Sprintf("%s: %s (%d)", e.Op, name, int32(e.Code))
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is matches another *Error with the same code, or with the same category
// when the target's code is a bare category (StatusBadParam,
// StatusNotSupported, ...).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code || (t.Code%1000 == 0 && t.Code != 0 && e.Code.Category() == t.Code)
}

// Sentinels for errors.Is.
var (
	ErrBadParam     = &Error{Code: StatusBadParam}
	ErrNotSupported = &Error{Code: StatusNotSupported}
)

// check turns a status into nil or an *Error; it must run on the thread
// that made the call (the last-error message is per thread).
func check(op string, r int32) error {
	if r == 0 {
		return nil
	}
	e := &Error{Op: op, Code: Status(r)}
	e.Name = e.Code.Name()
	if lib.cudnnGetLastErrorString != nil {
		buf := make([]byte, 1024)
		lib.cudnnGetLastErrorString(&buf[0], uintptr(len(buf)))
		e.Detail = oneLine(cstr(buf))
	}
	return e
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func oneLine(s string) string {
	out := make([]byte, 0, len(s))
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' || c == '\r' || c == '\t' || c == ' ' {
			space = len(out) > 0
			continue
		}
		if space {
			out = append(out, ' ')
			space = false
		}
		out = append(out, c)
	}
	return string(out)
}

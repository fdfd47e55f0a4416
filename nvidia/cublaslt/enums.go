package cublaslt

import "fmt"

// Values from library_types.h (cudaDataType_t), cublas_api.h
// (cublasStatus_t, cublasOperation_t, cublasComputeType_t) and cublasLt.h.

// DataType is a cudaDataType_t.
type DataType int32

// cudaDataType_t values.
const (
	R32F     DataType = 0  // CUDA_R_32F
	R64F     DataType = 1  // CUDA_R_64F
	R16F     DataType = 2  // CUDA_R_16F
	R8I      DataType = 3  // CUDA_R_8I
	R32I     DataType = 10 // CUDA_R_32I
	R16BF    DataType = 14 // CUDA_R_16BF
	R8F_E4M3 DataType = 28 // CUDA_R_8F_E4M3
	R8F_E5M2 DataType = 29 // CUDA_R_8F_E5M2
)

// Size returns the element size in bytes (0 if unknown here).
func (d DataType) Size() int {
	switch d {
	case R16F, R16BF:
		return 2
	case R32F, R32I:
		return 4
	case R64F:
		return 8
	case R8I, R8F_E4M3, R8F_E5M2:
		return 1
	}
	return 0
}

func (d DataType) String() string {
	switch d {
	case R32F:
		return "f32"
	case R64F:
		return "f64"
	case R16F:
		return "f16"
	case R16BF:
		return "bf16"
	case R8I:
		return "i8"
	case R32I:
		return "i32"
	case R8F_E4M3:
		return "fp8e4m3"
	case R8F_E5M2:
		return "fp8e5m2"
	}
	return fmt.Sprintf("DataType(%d)", int32(d))
}

// ComputeType is a cublasComputeType_t.
type ComputeType int32

// cublasComputeType_t values.
const (
	Compute16F         ComputeType = 64 // CUBLAS_COMPUTE_16F
	Compute16FPedantic ComputeType = 65
	Compute32F         ComputeType = 68 // CUBLAS_COMPUTE_32F
	Compute32FPedantic ComputeType = 69
	Compute64F         ComputeType = 70
	Compute64FPedantic ComputeType = 71
	Compute32I         ComputeType = 72
	Compute32IPedantic ComputeType = 73
	Compute32FFast16F  ComputeType = 74 // CUBLAS_COMPUTE_32F_FAST_16F
	Compute32FFast16BF ComputeType = 75 // CUBLAS_COMPUTE_32F_FAST_16BF
	Compute32FFastTF32 ComputeType = 77 // CUBLAS_COMPUTE_32F_FAST_TF32
)

// Operation is a cublasOperation_t.
type Operation int32

// cublasOperation_t values.
const (
	OpN Operation = 0 // CUBLAS_OP_N
	OpT Operation = 1 // CUBLAS_OP_T
	OpC Operation = 2 // CUBLAS_OP_C
)

// Order is a cublasLtOrder_t.
type Order int32

// cublasLtOrder_t values.
const (
	OrderCol Order = 0 // CUBLASLT_ORDER_COL
	OrderRow Order = 1 // CUBLASLT_ORDER_ROW
)

// Epilogue is a cublasLtEpilogue_t.
type Epilogue uint32

// cublasLtEpilogue_t values.
const (
	EpilogueDefault  Epilogue = 1  // CUBLASLT_EPILOGUE_DEFAULT
	EpilogueReLU     Epilogue = 2  // CUBLASLT_EPILOGUE_RELU
	EpilogueBias     Epilogue = 4  // CUBLASLT_EPILOGUE_BIAS
	EpilogueReLUBias Epilogue = 6  // CUBLASLT_EPILOGUE_RELU_BIAS
	EpilogueGELU     Epilogue = 32 // CUBLASLT_EPILOGUE_GELU
	EpilogueGELUBias Epilogue = 36 // CUBLASLT_EPILOGUE_GELU_BIAS
)

// cublasLtMatmulDescAttributes_t.
const (
	descComputeType  int32 = 0  // int32
	descScaleType    int32 = 1  // int32
	descPointerMode  int32 = 2  // int32
	descTransA       int32 = 3  // int32 (cublasOperation_t)
	descTransB       int32 = 4  // int32
	descTransC       int32 = 5  // int32
	descEpilogue     int32 = 7  // uint32
	descBiasPointer  int32 = 8  // const void*
	descAScalePtr    int32 = 17 // const void* (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER)
	descBScalePtr    int32 = 18 // const void*
	descFastAccum    int32 = 25 // int8 (CUBLASLT_MATMUL_DESC_FAST_ACCUM)
	descBiasDataType int32 = 26 // int32
	descAScaleMode   int32 = 31 // int32 (cublasLtMatmulMatrixScale_t)
	descBScaleMode   int32 = 32 // int32
)

// ScaleMode is how the scale factors of fp8 inputs apply
// (cublasLtMatmulMatrixScale_t).
type ScaleMode int32

// cublasLtMatmulMatrixScale_t values vsr uses.
const (
	// ScaleScalar: one float32 per matrix (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F).
	ScaleScalar ScaleMode = 0
	// ScaleOuterVec: one float32 per row of the caller's A and one per
	// column of D (per row of B when transB), the outer dimensions
	// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, cuBLASLt 12.9 and newer).
	ScaleOuterVec ScaleMode = 3
)

// cublasLtMatrixLayoutAttribute_t.
const (
	layoutType               int32 = 0 // uint32
	layoutOrder              int32 = 1 // int32
	layoutRows               int32 = 2 // uint64
	layoutCols               int32 = 3 // uint64
	layoutLD                 int32 = 4 // int64
	layoutBatchCount         int32 = 5 // int32
	layoutStridedBatchOffset int32 = 6 // int64
)

// cublasLtMatmulPreferenceAttributes_t.
const (
	prefSearchMode        int32 = 0 // uint32
	prefMaxWorkspaceBytes int32 = 1 // uint64
	prefMinAlignmentA     int32 = 5 // uint32
	prefMinAlignmentB     int32 = 6 // uint32
	prefMinAlignmentC     int32 = 7 // uint32
	prefMinAlignmentD     int32 = 8 // uint32
)

// Status is a cublasStatus_t.
type Status int32

// cublasStatus_t values.
const (
	StatusSuccess         Status = 0
	StatusNotInitialized  Status = 1
	StatusAllocFailed     Status = 3
	StatusInvalidValue    Status = 7
	StatusArchMismatch    Status = 8
	StatusMappingError    Status = 11
	StatusExecutionFailed Status = 13
	StatusInternalError   Status = 14
	StatusNotSupported    Status = 15
	StatusLicenseError    Status = 16
)

var statusNames = map[Status]string{
	0:  "CUBLAS_STATUS_SUCCESS",
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// Name returns the enum name (cublasLtGetStatusName when loaded, else a
// built-in table).
func (s Status) Name() string {
	if lib.cublasLtGetStatusName != nil {
		if n := lib.cublasLtGetStatusName(int32(s)); n != "" {
			return n
		}
	}
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "CUBLAS_STATUS_UNKNOWN"
}

// Error is a failed cuBLASLt call.
type Error struct {
	Op   string // the function, e.g. "cublasLtMatmul"
	Code Status
	Name string // e.g. "CUBLAS_STATUS_INVALID_VALUE"
	Msg  string // cublasLtGetStatusString's description
}

// Error formats as "cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE (7): an invalid value was used as an argument".
func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.Name()
	}
	s := fmt.Sprintf("%s: %s (%d)", e.Op, name, int32(e.Code))
	if e.Msg != "" && e.Msg != name {
		s += ": " + e.Msg
	}
	return s
}

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotSupported = &Error{Code: StatusNotSupported}
	ErrInvalidValue = &Error{Code: StatusInvalidValue}
)

func check(op string, r int32) error {
	if r == 0 {
		return nil
	}
	e := &Error{Op: op, Code: Status(r)}
	e.Name = e.Code.Name()
	if lib.cublasLtGetStatusString != nil {
		e.Msg = lib.cublasLtGetStatusString(r)
	}
	return e
}

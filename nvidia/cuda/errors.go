package cuda

import (
	"fmt"
	"sync"
)

// Result is a CUresult, the status code of a driver API call.
type Result int32

// Result codes that callers test for. The full list is in cuda.h; [Error]
// carries any code with the driver's own name for it.
const (
	Success                 Result = 0
	ErrorInvalidValue       Result = 1
	ErrorOutOfMemory        Result = 2
	ErrorNotInitialized     Result = 3
	ErrorDeinitialized      Result = 4
	ErrorStubLibrary        Result = 34
	ErrorNoDevice           Result = 100
	ErrorInvalidDevice      Result = 101
	ErrorInvalidImage       Result = 200
	ErrorInvalidContext     Result = 201
	ErrorNoBinaryForGPU     Result = 209
	ErrorPeerAccessUnsupp   Result = 217
	ErrorInvalidPTX         Result = 218
	ErrorUnsupportedPTX     Result = 222
	ErrorInvalidHandle      Result = 400
	ErrorNotFound           Result = 500
	ErrorNotReady           Result = 600
	ErrorIllegalAddress     Result = 700
	ErrorLaunchOutOfRes     Result = 701
	ErrorPeerAccessEnabled  Result = 704
	ErrorPeerAccessDisabled Result = 705
	ErrorLaunchFailed       Result = 719
	ErrorNotPermitted       Result = 800
	ErrorNotSupported       Result = 801
	ErrorCaptureInvalidated Result = 901
	ErrorCaptureWrongThread Result = 908
	ErrorUnknown            Result = 999
)

// Sentinel errors for errors.Is: an *Error matches the sentinel with the
// same code, whatever call returned it.
var (
	ErrOutOfMemory    = &Error{Code: ErrorOutOfMemory}
	ErrNoDevice       = &Error{Code: ErrorNoDevice}
	ErrInvalidContext = &Error{Code: ErrorInvalidContext}
	ErrNotReady       = &Error{Code: ErrorNotReady}
	ErrNotSupported   = &Error{Code: ErrorNotSupported}
)

// Error is a failed driver API call: the function, the CUresult code and
// the driver's name and description for it.
type Error struct {
	// Op is the driver function that failed, e.g. "cuMemAlloc_v2".
	Op string
	// Code is the CUresult.
	Code Result
	// Name is the enum name, e.g. "CUDA_ERROR_OUT_OF_MEMORY".
	Name string
	// Msg is the driver's description, e.g. "out of memory".
	Msg string
}

// Error formats as "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.Name()
	}
	s := fmt.Sprintf("%s (%d)", name, int32(e.Code))
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Name returns the CUresult's enum name, from the driver when it is loaded
// (cuGetErrorName) and otherwise from a built-in table.
func (r Result) Name() string {
	if n, _ := driverErrorText(r); n != "" {
		return n
	}
	if n, ok := resultNames[r]; ok {
		return n
	}
	return "CUDA_ERROR_UNRECOGNIZED"
}

// check turns a CUresult into nil or an *Error for op.
func check(op string, r int32) error {
	if r == 0 {
		return nil
	}
	return newError(op, Result(r))
}

func newError(op string, r Result) *Error {
	name, msg := driverErrorText(r)
	if name == "" {
		name = resultNames[r]
		if name == "" {
			name = "CUDA_ERROR_UNRECOGNIZED"
		}
	}
	return &Error{Op: op, Code: r, Name: name, Msg: msg}
}

var errTextCache sync.Map // Result -> [2]string

func driverErrorText(r Result) (name, msg string) {
	if v, ok := errTextCache.Load(r); ok {
		t := v.([2]string)
		return t[0], t[1]
	}
	if drv.cuGetErrorName == nil || drv.cuGetErrorString == nil {
		return "", ""
	}
	var pn, ps *byte
	if drv.cuGetErrorName(int32(r), &pn) == 0 {
		name = cString(pn)
	}
	if drv.cuGetErrorString(int32(r), &ps) == 0 {
		msg = cString(ps)
	}
	if name != "" {
		errTextCache.Store(r, [2]string{name, msg})
	}
	return name, msg
}

var resultNames = map[Result]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	5:   "CUDA_ERROR_PROFILER_DISABLED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	205: "CUDA_ERROR_MAP_FAILED",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	214: "CUDA_ERROR_ECC_UNCORRECTABLE",
	217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	218: "CUDA_ERROR_INVALID_PTX",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	300: "CUDA_ERROR_INVALID_SOURCE",
	301: "CUDA_ERROR_FILE_NOT_FOUND",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
	709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	710: "CUDA_ERROR_ASSERT",
	715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
	800: "CUDA_ERROR_NOT_PERMITTED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
	903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
	905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	907: "CUDA_ERROR_CAPTURED_EVENT",
	908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
	999: "CUDA_ERROR_UNKNOWN",
}

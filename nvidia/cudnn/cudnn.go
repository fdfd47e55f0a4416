// Package cudnn binds the legacy convolution API of cuDNN 9 (libcudnn.so.9)
// through purego, enough to run NHWC fp16/bf16 2-D convolutions on tensor
// cores from a CGO_ENABLED=0 binary.
//
// # Use
//
//	h, _ := cudnn.NewHandle(ctx)          // ctx is a *cuda.Context
//	h.SetStream(stream)                   // a *cuda.Stream
//	cache := cudnn.NewCache(h, cudnn.Options{Search: cudnn.SearchBenchmark})
//	conv, _ := cache.Get(cudnn.Shape{DType: cudnn.DataHalf, N: 1, H: 360, W: 640,
//		C: 64, K: 64, KH: 3, KW: 3, PadH: 1, PadW: 1})
//	conv.Forward(h, x, w, y, ws, wsSize) // wsSize >= conv.WorkspaceSize()
//
// A [Conv] is built once per [Shape]: its descriptors, its output size, its
// algorithm (benchmarked with cudnnFindConvolutionForwardAlgorithmEx or
// taken from the cudnnGetConvolutionForwardAlgorithm_v7 heuristic) and its
// workspace size. [Cache] keeps one Conv per Shape so that the search runs
// once.
//
// # Layouts
//
// Activations x (N,H,W,C) and y (N,Ho,Wo,K) are NHWC, densely packed. The
// filter is KRSC: w[k][r][s][c] with r over KH and s over KW (cuDNN's
// "NHWC" filter format). The convolution is a cross-correlation (no filter
// flip), as in PyTorch and ncnn. Data are DataHalf or DataBFloat16 (or
// DataFloat); accumulation is in float (the convolution descriptor's compute
// type), so alpha and beta are float32 values on the host.
//
// # Threads and contexts
//
// Every call here makes the handle's CUDA context current on the calling
// thread for its duration (like the cuda package does), so a Handle may be
// used from any goroutine, but from one at a time: a cuDNN handle is not
// safe for concurrent use. Use one Handle per stream.
package cudnn

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// lib holds the bound cuDNN functions.
var lib struct {
	l *dl.Library

	cudnnGetVersion          func() uintptr
	cudnnGetErrorString      func(status int32) string
	cudnnGetLastErrorString  func(msg *byte, max uintptr)
	cudnnCreate              func(h *uintptr) int32
	cudnnDestroy             func(h uintptr) int32
	cudnnSetStream           func(h uintptr, s uintptr) int32
	cudnnGetStream           func(h uintptr, s *uintptr) int32
	cudnnCreateTensorDesc    func(d *uintptr) int32
	cudnnDestroyTensorDesc   func(d uintptr) int32
	cudnnSetTensor4dDesc     func(d uintptr, format, dtype, n, c, h, w int32) int32
	cudnnCreateFilterDesc    func(d *uintptr) int32
	cudnnDestroyFilterDesc   func(d uintptr) int32
	cudnnSetFilter4dDesc     func(d uintptr, dtype, format, k, c, h, w int32) int32
	cudnnCreateConvDesc      func(d *uintptr) int32
	cudnnDestroyConvDesc     func(d uintptr) int32
	cudnnSetConv2dDesc       func(d uintptr, padH, padW, u, v, dilH, dilW, mode, computeType int32) int32
	cudnnSetConvMathType     func(d uintptr, mathType int32) int32
	cudnnSetConvGroupCount   func(d uintptr, groups int32) int32
	cudnnGetConv2dFwdOutDim  func(conv, x, w uintptr, n, c, h, wd *int32) int32
	cudnnGetConvFwdAlgoMax   func(h uintptr, count *int32) int32
	cudnnGetConvFwdAlgoV7    func(h, x, w, conv, y uintptr, requested int32, returned *int32, perf unsafe.Pointer) int32
	cudnnFindConvFwdAlgoEx   func(h, xd, x, wd, w, conv, yd, y uintptr, requested int32, returned *int32, perf unsafe.Pointer, ws, wsSize uintptr) int32
	cudnnGetConvFwdWorkspace func(h, x, w, conv, y uintptr, algo int32, size *uintptr) int32
	cudnnConvFwd             func(h uintptr, alpha unsafe.Pointer, xd, x, wd, w, conv uintptr, algo int32, ws, wsSize uintptr, beta unsafe.Pointer, yd, y uintptr) int32

	// Optional: the fused convolution + bias + activation.
	cudnnConvBiasActFwd func(h uintptr, alpha1 unsafe.Pointer, xd, x, wd, w, conv uintptr, algo int32, ws, wsSize uintptr, alpha2 unsafe.Pointer, zd, z, bd, b, act, yd, y uintptr) int32
	cudnnCreateActDesc  func(d *uintptr) int32
	cudnnDestroyActDesc func(d uintptr) int32
	cudnnSetActDesc     func(d uintptr, mode, nan int32, coef float64) int32
	hasBiasActivation   bool
}

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens libcudnn.so.9 (see dl.SearchPlaces for where it looks) and
// binds the functions this package uses. It returns the same result every
// time; a missing library is a *dl.NotFoundError listing the places searched.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

func load() error {
	l, err := dl.Load(dl.CUDNN)
	if err != nil {
		return err
	}
	b := l.Binder()
	b.Bind(&lib.cudnnGetVersion, "cudnnGetVersion")
	b.Bind(&lib.cudnnGetErrorString, "cudnnGetErrorString")
	b.Bind(&lib.cudnnCreate, "cudnnCreate")
	b.Bind(&lib.cudnnDestroy, "cudnnDestroy")
	b.Bind(&lib.cudnnSetStream, "cudnnSetStream")
	b.Bind(&lib.cudnnGetStream, "cudnnGetStream")
	b.Bind(&lib.cudnnCreateTensorDesc, "cudnnCreateTensorDescriptor")
	b.Bind(&lib.cudnnDestroyTensorDesc, "cudnnDestroyTensorDescriptor")
	b.Bind(&lib.cudnnSetTensor4dDesc, "cudnnSetTensor4dDescriptor")
	b.Bind(&lib.cudnnCreateFilterDesc, "cudnnCreateFilterDescriptor")
	b.Bind(&lib.cudnnDestroyFilterDesc, "cudnnDestroyFilterDescriptor")
	b.Bind(&lib.cudnnSetFilter4dDesc, "cudnnSetFilter4dDescriptor")
	b.Bind(&lib.cudnnCreateConvDesc, "cudnnCreateConvolutionDescriptor")
	b.Bind(&lib.cudnnDestroyConvDesc, "cudnnDestroyConvolutionDescriptor")
	b.Bind(&lib.cudnnSetConv2dDesc, "cudnnSetConvolution2dDescriptor")
	b.Bind(&lib.cudnnSetConvMathType, "cudnnSetConvolutionMathType")
	b.Bind(&lib.cudnnSetConvGroupCount, "cudnnSetConvolutionGroupCount")
	b.Bind(&lib.cudnnGetConv2dFwdOutDim, "cudnnGetConvolution2dForwardOutputDim")
	b.Bind(&lib.cudnnGetConvFwdAlgoMax, "cudnnGetConvolutionForwardAlgorithmMaxCount")
	b.Bind(&lib.cudnnGetConvFwdAlgoV7, "cudnnGetConvolutionForwardAlgorithm_v7")
	b.Bind(&lib.cudnnFindConvFwdAlgoEx, "cudnnFindConvolutionForwardAlgorithmEx")
	b.Bind(&lib.cudnnGetConvFwdWorkspace, "cudnnGetConvolutionForwardWorkspaceSize")
	b.Bind(&lib.cudnnConvFwd, "cudnnConvolutionForward")
	if err := b.Err(); err != nil {
		return fmt.Errorf("cudnn: %s lacks the legacy convolution API vsr needs: %w", l.Path, err)
	}
	b.Optional(&lib.cudnnGetLastErrorString, "cudnnGetLastErrorString")
	lib.hasBiasActivation = b.Optional(&lib.cudnnConvBiasActFwd, "cudnnConvolutionBiasActivationForward") &&
		b.Optional(&lib.cudnnCreateActDesc, "cudnnCreateActivationDescriptor") &&
		b.Optional(&lib.cudnnDestroyActDesc, "cudnnDestroyActivationDescriptor") &&
		b.Optional(&lib.cudnnSetActDesc, "cudnnSetActivationDescriptor")
	lib.l = l
	return nil
}

// LibraryPath returns where libcudnn was loaded from ("" before a
// successful [Load]).
func LibraryPath() string {
	if lib.l == nil {
		return ""
	}
	return lib.l.Path
}

// Version returns cudnnGetVersion(): major*10000 + minor*100 + patch for
// cuDNN 9 (91400 for 9.14.0). It loads the library if needed.
func Version() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	return int(lib.cudnnGetVersion()), nil
}

// VersionString formats a cuDNN 9 version number (91400) as "9.14.0".
func VersionString(v int) string {
	return dl.VersionString(v)
}

// HasBiasActivation reports whether the loaded library exports
// cudnnConvolutionBiasActivationForward (used by [Conv.ForwardBiasAct]).
func HasBiasActivation() bool { return Load() == nil && lib.hasBiasActivation }

// Package cuda binds the CUDA driver API (libcuda.so.1) through purego.
//
// Start with [Init], pick a [Device] with [GetDevice] and retain its primary
// [Context]. Every resource (Context, [Buffer], [HostBuffer], [Stream],
// [Event], [Module], [Graph], [GraphExec]) has one owner and a Close or Free
// method that may be called more than once.
//
// # Threads
//
// A CUDA context is current per OS thread, and Go moves goroutines between
// threads. Every method here makes its context current for the duration of
// the call (cuCtxPushCurrent/cuCtxPopCurrent on a thread held with
// runtime.LockOSThread, or nothing when it is current already), so they may
// be called from any goroutine. The goroutine that drives the GPU should
// still call [Context.LockThread] once: its calls then find the context
// current and skip the push and pop, and stream capture, which the driver
// tracks per thread, stays on one thread.
//
// Failed calls return an [*Error] with the CUDA error name and code.
package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// drv holds the bound driver functions; it is filled by load.
var drv struct {
	lib *dl.Library

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuGetErrorName            func(r int32, s **byte) int32
	cuGetErrorString          func(r int32, s **byte) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(d *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDeviceTotalMem          func(b *uintptr, dev int32) int32
	cuDeviceGetUuid           func(uuid *[16]byte, dev int32) int32
	cuDeviceGetPCIBusId       func(id *byte, n int32, dev int32) int32
	cuDeviceCanAccessPeer     func(can *int32, dev, peer int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxGetCurrent           func(ctx *uintptr) int32
	cuCtxPushCurrent          func(ctx uintptr) int32
	cuCtxPopCurrent           func(ctx *uintptr) int32
	cuCtxSynchronize          func() int32
	cuCtxEnablePeerAccess     func(peer uintptr, flags uint32) int32
	cuMemGetInfo              func(free, total *uintptr) int32
	cuMemAlloc                func(p *uint64, n uintptr) int32
	cuMemFree                 func(p uint64) int32
	cuMemAllocHost            func(p *unsafe.Pointer, n uintptr) int32
	cuMemAllocFromPoolAsync   func(p *uint64, n uintptr, pool uintptr, s uintptr) int32
	cuMemFreeAsync            func(p uint64, s uintptr) int32
	cuMemPoolCreate           func(pool *uintptr, props unsafe.Pointer) int32
	cuMemPoolDestroy          func(pool uintptr) int32
	cuMemPoolSetAttribute     func(pool uintptr, attr int32, v unsafe.Pointer) int32
	cuMemPoolGetAttribute     func(pool uintptr, attr int32, v unsafe.Pointer) int32
	cuMemPoolTrimTo           func(pool uintptr, keep uintptr) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uintptr, s uintptr) int32
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, n uintptr, s uintptr) int32
	cuMemcpyDtoDAsync         func(dst, src uint64, n uintptr, s uintptr) int32
	cuMemcpyPeerAsync         func(dst uint64, dstCtx uintptr, src uint64, srcCtx uintptr, n uintptr, s uintptr) int32
	cuMemsetD8Async           func(dst uint64, v uint8, n uintptr, s uintptr) int32
	cuMemsetD32Async          func(dst uint64, v uint32, n uintptr, s uintptr) int32
	cuStreamCreate            func(s *uintptr, flags uint32) int32
	cuStreamSynchronize       func(s uintptr) int32
	cuStreamQuery             func(s uintptr) int32
	cuStreamDestroy           func(s uintptr) int32
	cuStreamWaitEvent         func(s, e uintptr, flags uint32) int32
	cuEventCreate             func(e *uintptr, flags uint32) int32
	cuEventRecord             func(e, s uintptr) int32
	cuEventSynchronize        func(e uintptr) int32
	cuEventQuery              func(e uintptr) int32
	cuEventElapsedTime        func(ms *float32, start, end uintptr) int32
	cuEventDestroy            func(e uintptr) int32
	cuModuleLoadData          func(m *uintptr, image unsafe.Pointer) int32
	cuModuleGetFunction       func(f *uintptr, m uintptr, name string) int32
	cuModuleUnload            func(m uintptr) int32
	cuFuncGetAttribute        func(v *int32, attr int32, f uintptr) int32
	cuFuncSetAttribute        func(f uintptr, attr int32, v int32) int32
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, s uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuStreamBeginCapture      func(s uintptr, mode int32) int32
	cuStreamEndCapture        func(s uintptr, g *uintptr) int32
	cuStreamIsCapturing       func(s uintptr, status *int32) int32
	cuGraphInstantiate        func(exec *uintptr, g uintptr, flags uint64) int32
	cuGraphLaunch             func(exec, s uintptr) int32
	cuGraphExecDestroy        func(exec uintptr) int32
	cuGraphDestroy            func(g uintptr) int32
	cuGraphGetNodes           func(g uintptr, nodes *uintptr, n *uintptr) int32
	cuDeviceGraphMemTrim      func(dev int32) int32
}

var (
	loadOnce sync.Once
	loadErr  error
	initOnce sync.Once
	initErr  error
)

// Load opens libcuda and binds the driver functions; it does not call
// cuInit. It returns the same result every time.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

func load() error {
	lib, err := dl.Load(dl.CUDA)
	if err != nil {
		return err
	}
	drv.lib = lib
	b := lib.Binder()
	b.Bind(&drv.cuInit, "cuInit")
	b.Bind(&drv.cuDriverGetVersion, "cuDriverGetVersion")
	b.Bind(&drv.cuGetErrorName, "cuGetErrorName")
	b.Bind(&drv.cuGetErrorString, "cuGetErrorString")
	b.Bind(&drv.cuDeviceGetCount, "cuDeviceGetCount")
	b.Bind(&drv.cuDeviceGet, "cuDeviceGet")
	b.Bind(&drv.cuDeviceGetName, "cuDeviceGetName")
	b.Bind(&drv.cuDeviceGetAttribute, "cuDeviceGetAttribute")
	b.Bind(&drv.cuDeviceTotalMem, "cuDeviceTotalMem_v2")
	b.Optional(&drv.cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid")
	b.Optional(&drv.cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")
	b.Bind(&drv.cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer")
	b.Bind(&drv.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	b.Bind(&drv.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")
	b.Bind(&drv.cuCtxSetCurrent, "cuCtxSetCurrent")
	b.Bind(&drv.cuCtxGetCurrent, "cuCtxGetCurrent")
	b.Bind(&drv.cuCtxPushCurrent, "cuCtxPushCurrent_v2")
	b.Bind(&drv.cuCtxPopCurrent, "cuCtxPopCurrent_v2")
	b.Bind(&drv.cuCtxSynchronize, "cuCtxSynchronize")
	b.Bind(&drv.cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess")
	b.Bind(&drv.cuMemGetInfo, "cuMemGetInfo_v2")
	b.Bind(&drv.cuMemAlloc, "cuMemAlloc_v2")
	b.Bind(&drv.cuMemFree, "cuMemFree_v2")
	b.Bind(&drv.cuMemAllocHost, "cuMemAllocHost_v2")
	b.Bind(&drv.cuMemFreeHost, "cuMemFreeHost")
	b.Bind(&drv.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	b.Bind(&drv.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	b.Bind(&drv.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
	b.Bind(&drv.cuMemcpyPeerAsync, "cuMemcpyPeerAsync")
	b.Bind(&drv.cuMemsetD8Async, "cuMemsetD8Async")
	b.Bind(&drv.cuMemsetD32Async, "cuMemsetD32Async")
	b.Bind(&drv.cuStreamCreate, "cuStreamCreate")
	b.Bind(&drv.cuStreamSynchronize, "cuStreamSynchronize")
	b.Bind(&drv.cuStreamQuery, "cuStreamQuery")
	b.Bind(&drv.cuStreamDestroy, "cuStreamDestroy_v2")
	b.Bind(&drv.cuStreamWaitEvent, "cuStreamWaitEvent")
	b.Bind(&drv.cuEventCreate, "cuEventCreate")
	b.Bind(&drv.cuEventRecord, "cuEventRecord")
	b.Bind(&drv.cuEventSynchronize, "cuEventSynchronize")
	b.Bind(&drv.cuEventQuery, "cuEventQuery")
	b.Bind(&drv.cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime")
	b.Bind(&drv.cuEventDestroy, "cuEventDestroy_v2")
	b.Bind(&drv.cuModuleLoadData, "cuModuleLoadData")
	b.Bind(&drv.cuModuleGetFunction, "cuModuleGetFunction")
	b.Bind(&drv.cuModuleUnload, "cuModuleUnload")
	b.Bind(&drv.cuFuncGetAttribute, "cuFuncGetAttribute")
	b.Bind(&drv.cuFuncSetAttribute, "cuFuncSetAttribute")
	b.Bind(&drv.cuLaunchKernel, "cuLaunchKernel")
	b.Bind(&drv.cuStreamBeginCapture, "cuStreamBeginCapture_v2")
	b.Bind(&drv.cuStreamEndCapture, "cuStreamEndCapture")
	b.Optional(&drv.cuStreamIsCapturing, "cuStreamIsCapturing")
	b.Optional(&drv.cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")
	b.Optional(&drv.cuMemFreeAsync, "cuMemFreeAsync")
	b.Optional(&drv.cuMemPoolCreate, "cuMemPoolCreate")
	b.Optional(&drv.cuMemPoolDestroy, "cuMemPoolDestroy")
	b.Optional(&drv.cuMemPoolSetAttribute, "cuMemPoolSetAttribute")
	b.Optional(&drv.cuMemPoolGetAttribute, "cuMemPoolGetAttribute")
	b.Optional(&drv.cuMemPoolTrimTo, "cuMemPoolTrimTo")
	b.Bind(&drv.cuGraphInstantiate, "cuGraphInstantiateWithFlags")
	b.Bind(&drv.cuGraphLaunch, "cuGraphLaunch")
	b.Bind(&drv.cuGraphExecDestroy, "cuGraphExecDestroy")
	b.Bind(&drv.cuGraphDestroy, "cuGraphDestroy")
	b.Optional(&drv.cuGraphGetNodes, "cuGraphGetNodes")
	b.Optional(&drv.cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim")
	if err := b.Err(); err != nil {
		return fmt.Errorf("cuda: libcuda at %s is too old for vsr: %w", lib.Path, err)
	}
	return nil
}

// Init loads libcuda and calls cuInit(0) once; later calls return the same
// result. A machine without a driver or GPU gets the library search error
// or CUDA_ERROR_NO_DEVICE (100).
func Init() error {
	initOnce.Do(func() {
		if initErr = Load(); initErr != nil {
			return
		}
		initErr = check("cuInit", drv.cuInit(0))
	})
	return initErr
}

// LibraryPath returns where libcuda was loaded from ("" before [Load]).
func LibraryPath() string {
	if drv.lib == nil {
		return ""
	}
	return drv.lib.Path
}

// DriverVersion returns the CUDA version the driver supports as
// 1000*major + 10*minor (13000 for CUDA 13.0). It needs no cuInit.
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuDriverGetVersion", drv.cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// VersionString formats a CUDA version number (13000) as "13.0".
func VersionString(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

func cString(p *byte) string { return dl.CString(p) }

// Package nvml binds the NVIDIA Management Library (libnvidia-ml.so.1)
// through purego: driver version, devices, memory and utilization, and a
// [Sampler] that polls memory use and GPU utilization in the background.
//
// NVML needs no CUDA context and may be called from any goroutine.
package nvml

import (
	"fmt"
	"sync"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// Return is an nvmlReturn_t status code.
type Return int32

// Return codes that callers test for.
const (
	Success      Return = 0
	NotSupported Return = 3
	NoPermission Return = 4
	NotFound     Return = 6
	GPUIsLost    Return = 15
)

var returnNames = map[Return]string{
	0:   "NVML_SUCCESS",
	1:   "NVML_ERROR_UNINITIALIZED",
	2:   "NVML_ERROR_INVALID_ARGUMENT",
	3:   "NVML_ERROR_NOT_SUPPORTED",
	4:   "NVML_ERROR_NO_PERMISSION",
	5:   "NVML_ERROR_ALREADY_INITIALIZED",
	6:   "NVML_ERROR_NOT_FOUND",
	7:   "NVML_ERROR_INSUFFICIENT_SIZE",
	8:   "NVML_ERROR_INSUFFICIENT_POWER",
	9:   "NVML_ERROR_DRIVER_NOT_LOADED",
	10:  "NVML_ERROR_TIMEOUT",
	11:  "NVML_ERROR_IRQ_ISSUE",
	12:  "NVML_ERROR_LIBRARY_NOT_FOUND",
	13:  "NVML_ERROR_FUNCTION_NOT_FOUND",
	14:  "NVML_ERROR_CORRUPTED_INFOROM",
	15:  "NVML_ERROR_GPU_IS_LOST",
	16:  "NVML_ERROR_RESET_REQUIRED",
	17:  "NVML_ERROR_OPERATING_SYSTEM",
	18:  "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
	19:  "NVML_ERROR_IN_USE",
	20:  "NVML_ERROR_MEMORY",
	21:  "NVML_ERROR_NO_DATA",
	22:  "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
	23:  "NVML_ERROR_INSUFFICIENT_RESOURCES",
	24:  "NVML_ERROR_FREQ_NOT_SUPPORTED",
	25:  "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
	26:  "NVML_ERROR_DEPRECATED",
	27:  "NVML_ERROR_NOT_READY",
	28:  "NVML_ERROR_GPU_NOT_FOUND",
	29:  "NVML_ERROR_INVALID_STATE",
	999: "NVML_ERROR_UNKNOWN",
}

// Name returns the nvmlReturn_t's enum name.
func (r Return) Name() string {
	if n, ok := returnNames[r]; ok {
		return n
	}
	return "NVML_ERROR_UNRECOGNIZED"
}

// Error is a failed NVML call: the function, the code, its enum name and
// NVML's description.
type Error struct {
	Op   string // the NVML function
	Code Return // the nvmlReturn_t
	Name string // its enum name, "NVML_ERROR_NOT_SUPPORTED"
	Msg  string // nvmlErrorString's description
}

// Error formats as "nvmlDeviceGetMemoryInfo: NVML_ERROR_NOT_SUPPORTED (3): Not Supported".
func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, int32(e.Code))
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

func check(op string, r int32) error {
	if r == 0 {
		return nil
	}
	e := &Error{Op: op, Code: Return(r), Name: Return(r).Name()}
	if lib.nvmlErrorString != nil {
		e.Msg = lib.nvmlErrorString(r)
	}
	return e
}

// memoryV1 is nvmlMemory_t.
type memoryV1 struct{ total, free, used uint64 }

// memoryV2 is nvmlMemory_v2_t.
type memoryV2 struct {
	version                     uint32
	_                           uint32
	total, reserved, free, used uint64
}

// nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2).
const memoryV2Version = 40 | 2<<24

type utilization struct{ gpu, memory uint32 }

var lib struct {
	lib  *dl.Library
	once sync.Once
	err  error

	nvmlInit                       func() int32
	nvmlErrorString                func(r int32) string
	nvmlSystemGetDriverVersion     func(buf *byte, n uint32) int32
	nvmlSystemGetCudaDriverVersion func(v *int32) int32
	nvmlDeviceGetCount             func(n *uint32) int32
	nvmlDeviceGetHandleByIndex     func(i uint32, dev *uintptr) int32
	nvmlDeviceGetHandleByUUID      func(uuid string, dev *uintptr) int32
	nvmlDeviceGetName              func(dev uintptr, buf *byte, n uint32) int32
	nvmlDeviceGetUUID              func(dev uintptr, buf *byte, n uint32) int32
	nvmlDeviceGetMemoryInfo        func(dev uintptr, m *memoryV1) int32
	nvmlDeviceGetMemoryInfoV2      func(dev uintptr, m *memoryV2) int32
	nvmlDeviceGetUtilizationRates  func(dev uintptr, u *utilization) int32
}

// Init loads libnvidia-ml and calls nvmlInit_v2 once; later calls return
// the same result. NVML stays initialized for the life of the process.
func Init() error {
	lib.once.Do(func() { lib.err = load() })
	return lib.err
}

func load() error {
	l, err := dl.Load(dl.NVML)
	if err != nil {
		return err
	}
	lib.lib = l
	b := l.Binder()
	b.Bind(&lib.nvmlInit, "nvmlInit_v2")
	b.Bind(&lib.nvmlErrorString, "nvmlErrorString")
	b.Bind(&lib.nvmlSystemGetDriverVersion, "nvmlSystemGetDriverVersion")
	b.Bind(&lib.nvmlDeviceGetCount, "nvmlDeviceGetCount_v2")
	b.Bind(&lib.nvmlDeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2")
	b.Bind(&lib.nvmlDeviceGetName, "nvmlDeviceGetName")
	b.Bind(&lib.nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo")
	b.Bind(&lib.nvmlDeviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates")
	if err := b.Err(); err != nil {
		return err
	}
	b.Optional(&lib.nvmlSystemGetCudaDriverVersion, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion")
	b.Optional(&lib.nvmlDeviceGetHandleByUUID, "nvmlDeviceGetHandleByUUID")
	b.Optional(&lib.nvmlDeviceGetUUID, "nvmlDeviceGetUUID")
	b.Optional(&lib.nvmlDeviceGetMemoryInfoV2, "nvmlDeviceGetMemoryInfo_v2")
	return check("nvmlInit_v2", lib.nvmlInit())
}

// LibraryPath returns where libnvidia-ml was loaded from ("" before Init).
func LibraryPath() string {
	if lib.lib == nil {
		return ""
	}
	return lib.lib.Path
}

func notSupported(op string) error {
	return &Error{Op: op, Code: NotSupported, Name: NotSupported.Name(), Msg: "not in this libnvidia-ml"}
}

// DriverVersion returns the NVIDIA driver version, e.g. "580.159.04".
func DriverVersion() (string, error) {
	if err := Init(); err != nil {
		return "", err
	}
	buf := make([]byte, 96)
	if err := check("nvmlSystemGetDriverVersion", lib.nvmlSystemGetDriverVersion(&buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	return dl.GoString(buf), nil
}

// CUDADriverVersion returns the CUDA version the driver supports as
// 1000*major + 10*minor (13000).
func CUDADriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	if lib.nvmlSystemGetCudaDriverVersion == nil {
		return 0, notSupported("nvmlSystemGetCudaDriverVersion")
	}
	var v int32
	if err := check("nvmlSystemGetCudaDriverVersion_v2", lib.nvmlSystemGetCudaDriverVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns the number of GPUs NVML sees.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n uint32
	if err := check("nvmlDeviceGetCount_v2", lib.nvmlDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Device is an nvmlDevice_t handle. NVML numbers devices by PCI address,
// which may differ from CUDA's order; match them with [DeviceByUUID].
type Device struct {
	h     uintptr
	index int
}

// DeviceByIndex returns the device with NVML index i.
func DeviceByIndex(i int) (Device, error) {
	if err := Init(); err != nil {
		return Device{}, err
	}
	var h uintptr
	if err := check("nvmlDeviceGetHandleByIndex_v2", lib.nvmlDeviceGetHandleByIndex(uint32(i), &h)); err != nil {
		return Device{}, err
	}
	return Device{h: h, index: i}, nil
}

// DeviceByUUID returns the device with the given UUID ("GPU-..."), as
// returned by cuda.Device.UUID.
func DeviceByUUID(uuid string) (Device, error) {
	if err := Init(); err != nil {
		return Device{}, err
	}
	if lib.nvmlDeviceGetHandleByUUID == nil {
		return Device{}, notSupported("nvmlDeviceGetHandleByUUID")
	}
	var h uintptr
	if err := check("nvmlDeviceGetHandleByUUID", lib.nvmlDeviceGetHandleByUUID(uuid, &h)); err != nil {
		return Device{}, err
	}
	return Device{h: h, index: -1}, nil
}

// Index returns the NVML index the device was opened by (-1 if by UUID).
func (d Device) Index() int { return d.index }

// Name returns the product name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	buf := make([]byte, 96)
	if err := check("nvmlDeviceGetName", lib.nvmlDeviceGetName(d.h, &buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	return dl.GoString(buf), nil
}

// UUID returns the device UUID, "GPU-xxxxxxxx-...".
func (d Device) UUID() (string, error) {
	if lib.nvmlDeviceGetUUID == nil {
		return "", notSupported("nvmlDeviceGetUUID")
	}
	buf := make([]byte, 96)
	if err := check("nvmlDeviceGetUUID", lib.nvmlDeviceGetUUID(d.h, &buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	return dl.GoString(buf), nil
}

// Memory is the device memory in bytes. Used excludes Reserved (memory
// the driver and firmware hold) when the driver can tell them apart.
type Memory struct {
	Total, Free, Used, Reserved uint64 // bytes
}

// Memory returns the device's memory use (nvmlDeviceGetMemoryInfo_v2, or
// nvmlDeviceGetMemoryInfo on older drivers).
func (d Device) Memory() (Memory, error) {
	if lib.nvmlDeviceGetMemoryInfoV2 != nil {
		m := memoryV2{version: memoryV2Version}
		if lib.nvmlDeviceGetMemoryInfoV2(d.h, &m) == 0 {
			return Memory{Total: m.total, Free: m.free, Used: m.used, Reserved: m.reserved}, nil
		}
	}
	var m memoryV1
	if err := check("nvmlDeviceGetMemoryInfo", lib.nvmlDeviceGetMemoryInfo(d.h, &m)); err != nil {
		return Memory{}, err
	}
	return Memory{Total: m.total, Free: m.free, Used: m.used}, nil
}

// Utilization is the percentage of the last sample period (1/6 s to 1 s,
// by product) during which a kernel ran (GPU) or device memory was read or
// written (Memory).
type Utilization struct {
	GPU, Memory uint32 // percent, 0 to 100
}

// Utilization returns the device's utilization rates
// (nvmlDeviceGetUtilizationRates).
func (d Device) Utilization() (Utilization, error) {
	var u utilization
	if err := check("nvmlDeviceGetUtilizationRates", lib.nvmlDeviceGetUtilizationRates(d.h, &u)); err != nil {
		return Utilization{}, err
	}
	return Utilization{GPU: u.gpu, Memory: u.memory}, nil
}

package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// Device is a CUdevice, a GPU as the driver numbers it.
type Device int32

// Attribute is a CUdevice_attribute.
type Attribute int32

// Device attributes used by vsr (values from cuda.h).
const (
	AttrMaxThreadsPerBlock           Attribute = 1
	AttrMaxSharedMemoryPerBlock      Attribute = 8
	AttrWarpSize                     Attribute = 10
	AttrClockRate                    Attribute = 13
	AttrMultiprocessorCount          Attribute = 16
	AttrPCIBusID                     Attribute = 33
	AttrMemoryBusWidth               Attribute = 37
	AttrL2CacheSize                  Attribute = 38
	AttrUnifiedAddressing            Attribute = 41
	AttrComputeCapabilityMajor       Attribute = 75
	AttrComputeCapabilityMinor       Attribute = 76
	AttrMaxSharedMemoryPerBlockOptin Attribute = 97
)

// DeviceCount returns the number of CUDA devices, after [Init].
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n int32
	if err := check("cuDeviceGetCount", drv.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// GetDevice returns the device with the given ordinal, after [Init].
func GetDevice(ordinal int) (Device, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var d int32
	if err := check("cuDeviceGet", drv.cuDeviceGet(&d, int32(ordinal))); err != nil {
		return 0, err
	}
	return Device(d), nil
}

// Name returns the device's marketing name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	buf := make([]byte, 256)
	if err := check("cuDeviceGetName", drv.cuDeviceGetName(&buf[0], int32(len(buf)), int32(d))); err != nil {
		return "", err
	}
	return dl.GoString(buf), nil
}

// Attribute returns one device attribute.
func (d Device) Attribute(a Attribute) (int, error) {
	var v int32
	if err := check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(&v, int32(a), int32(d))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// ComputeCapability returns the major and minor compute capability (9, 0
// for an H200).
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.Attribute(AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// SMCount returns the number of streaming multiprocessors.
func (d Device) SMCount() (int, error) { return d.Attribute(AttrMultiprocessorCount) }

// TotalMem returns the device memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	var n uintptr
	if err := check("cuDeviceTotalMem_v2", drv.cuDeviceTotalMem(&n, int32(d))); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// UUID returns the device UUID in NVML's form, "GPU-xxxxxxxx-xxxx-...".
func (d Device) UUID() (string, error) {
	if drv.cuDeviceGetUuid == nil {
		return "", &Error{Op: "cuDeviceGetUuid", Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED"}
	}
	var u [16]byte
	if err := check("cuDeviceGetUuid", drv.cuDeviceGetUuid(&u, int32(d))); err != nil {
		return "", err
	}
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// PCIBusID returns the device's PCI address, "0000:19:00.0".
func (d Device) PCIBusID() (string, error) {
	if drv.cuDeviceGetPCIBusId == nil {
		return "", &Error{Op: "cuDeviceGetPCIBusId", Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED"}
	}
	buf := make([]byte, 64)
	if err := check("cuDeviceGetPCIBusId", drv.cuDeviceGetPCIBusId(&buf[0], int32(len(buf)), int32(d))); err != nil {
		return "", err
	}
	return dl.GoString(buf), nil
}

// CanAccessPeer reports whether d can read and write peer's memory
// directly (cuDeviceCanAccessPeer). A device is never its own peer: d ==
// peer gives false and no error.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	if d == peer {
		return false, nil
	}
	var can int32
	if err := check("cuDeviceCanAccessPeer", drv.cuDeviceCanAccessPeer(&can, int32(d), int32(peer))); err != nil {
		return false, err
	}
	return can != 0, nil
}

package cuda

import (
	"errors"
	"unsafe"
)

// MemPool is a stream-ordered memory pool (CUmemoryPool) on one device:
// the driver suballocates blocks of any size from the memory the pool has
// reserved, and memory freed in a stream's order is reused by later work
// on that stream without synchronizing. Its owner destroys it with Close.
type MemPool struct{ h uintptr }

// Memory pool attributes (CUmemPool_attribute) used here.
const (
	poolAttrReleaseThreshold = 4
	poolAttrReservedCurrent  = 5
	poolAttrReservedHigh     = 6
)

// memPoolProps is CUmemPoolProps (88 bytes).
type memPoolProps struct {
	allocType    int32 // CU_MEM_ALLOCATION_TYPE_PINNED = 1
	handleTypes  int32
	locationType int32 // CU_MEM_LOCATION_TYPE_DEVICE = 1
	locationID   int32
	win32        uintptr
	reserved     [64]byte
}

// NewMemPool creates a memory pool of device memory on d
// (cuMemPoolCreate), or fails where the driver has no stream-ordered
// allocator (before CUDA 11.2).
func NewMemPool(d Device) (*MemPool, error) {
	if drv.cuMemPoolCreate == nil || drv.cuMemPoolDestroy == nil || drv.cuMemAllocFromPoolAsync == nil ||
		drv.cuMemFreeAsync == nil || drv.cuMemPoolSetAttribute == nil || drv.cuMemPoolGetAttribute == nil || drv.cuMemPoolTrimTo == nil {
		return nil, errors.New("cuda: the driver has no stream-ordered memory pools")
	}
	props := memPoolProps{allocType: 1, locationType: 1, locationID: int32(d)}
	var h uintptr
	if err := check("cuMemPoolCreate", drv.cuMemPoolCreate(&h, unsafe.Pointer(&props))); err != nil {
		return nil, err
	}
	return &MemPool{h: h}, nil
}

// Close destroys the pool (cuMemPoolDestroy); memory still allocated from
// it is released when freed. It is idempotent.
func (p *MemPool) Close() error {
	if p == nil || p.h == 0 {
		return nil
	}
	h := p.h
	p.h = 0
	return check("cuMemPoolDestroy", drv.cuMemPoolDestroy(h))
}

// SetReleaseThreshold sets how much reserved memory the pool keeps at
// synchronization points instead of returning it to the driver.
func (p *MemPool) SetReleaseThreshold(n uint64) error {
	return check("cuMemPoolSetAttribute", drv.cuMemPoolSetAttribute(p.h, poolAttrReleaseThreshold, unsafe.Pointer(&n)))
}

// Reserved returns the memory the pool holds from the driver now and its
// high-water mark.
func (p *MemPool) Reserved() (now, high uint64, err error) {
	if err = check("cuMemPoolGetAttribute", drv.cuMemPoolGetAttribute(p.h, poolAttrReservedCurrent, unsafe.Pointer(&now))); err == nil {
		err = check("cuMemPoolGetAttribute", drv.cuMemPoolGetAttribute(p.h, poolAttrReservedHigh, unsafe.Pointer(&high)))
	}
	return now, high, err
}

// ResetHigh starts the reserved high-water mark again from the memory
// reserved now.
func (p *MemPool) ResetHigh() error {
	var zero uint64
	return check("cuMemPoolSetAttribute", drv.cuMemPoolSetAttribute(p.h, poolAttrReservedHigh, unsafe.Pointer(&zero)))
}

// TrimTo returns unused reserved memory to the driver, keeping at least
// keep bytes reserved. Frees queued on streams count once they ran.
func (p *MemPool) TrimTo(keep uint64) error {
	return check("cuMemPoolTrimTo", drv.cuMemPoolTrimTo(p.h, uintptr(keep)))
}

// AllocAsync allocates n bytes from pool in the stream's order
// (cuMemAllocFromPoolAsync): work queued on s after this call may use it.
func (s *Stream) AllocAsync(pool *MemPool, n int) (DevicePtr, error) {
	var p uint64
	err := s.ctx.do(func() error {
		return check("cuMemAllocFromPoolAsync", drv.cuMemAllocFromPoolAsync(&p, uintptr(n), pool.h, s.h))
	})
	return DevicePtr(p), err
}

// FreeAsync returns p to its pool once the work queued on s before this
// call has run (cuMemFreeAsync).
func (s *Stream) FreeAsync(p DevicePtr) error {
	return s.ctx.do(func() error { return check("cuMemFreeAsync", drv.cuMemFreeAsync(uint64(p), s.h)) })
}

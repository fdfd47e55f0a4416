package cuda

import (
	"fmt"
	"unsafe"
)

// DevicePtr is a CUdeviceptr, an address in device memory.
type DevicePtr uint64

// Add returns p offset by off bytes.
func (p DevicePtr) Add(off int) DevicePtr { return p + DevicePtr(off) }

// Buffer is device memory from cuMemAlloc. Its owner frees it with Free.
type Buffer struct {
	ctx  *Context
	ptr  DevicePtr
	size int
}

// Alloc allocates n bytes of device memory (cuMemAlloc_v2).
func (c *Context) Alloc(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: Alloc of %d bytes", n)
	}
	var p uint64
	err := c.do(func() error {
		return check("cuMemAlloc_v2", drv.cuMemAlloc(&p, uintptr(n)))
	})
	if err != nil {
		return nil, err
	}
	return &Buffer{ctx: c, ptr: DevicePtr(p), size: n}, nil
}

// Ptr returns the buffer's device address (0 once freed).
func (b *Buffer) Ptr() DevicePtr { return b.ptr }

// Size returns the buffer's size in bytes.
func (b *Buffer) Size() int { return b.size }

// Free releases the memory (cuMemFree_v2). It is idempotent. Work that
// uses the buffer must have finished.
func (b *Buffer) Free() error {
	if b == nil || b.ptr == 0 {
		return nil
	}
	p := b.ptr
	b.ptr = 0
	return b.ctx.do(func() error { return check("cuMemFree_v2", drv.cuMemFree(uint64(p))) })
}

// HostBuffer is page-locked host memory from cuMemAllocHost: copies from
// and to it run asynchronously and at full speed. Its owner frees it with
// Free; the slice from Bytes must not be used after that.
type HostBuffer struct {
	ctx  *Context
	p    unsafe.Pointer
	size int
}

// AllocHost allocates n bytes of page-locked host memory
// (cuMemAllocHost_v2).
func (c *Context) AllocHost(n int) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: AllocHost of %d bytes", n)
	}
	var p unsafe.Pointer
	err := c.do(func() error {
		return check("cuMemAllocHost_v2", drv.cuMemAllocHost(&p, uintptr(n)))
	})
	if err != nil {
		return nil, err
	}
	return &HostBuffer{ctx: c, p: p, size: n}, nil
}

// Bytes returns the memory as a byte slice (nil once freed).
func (h *HostBuffer) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.size)
}

// Pointer returns the start of the memory (nil once freed).
func (h *HostBuffer) Pointer() unsafe.Pointer { return h.p }

// Size returns the size in bytes.
func (h *HostBuffer) Size() int { return h.size }

// Free releases the memory (cuMemFreeHost). It is idempotent.
func (h *HostBuffer) Free() error {
	if h == nil || h.p == nil {
		return nil
	}
	p := h.p
	h.p = nil
	return h.ctx.do(func() error { return check("cuMemFreeHost", drv.cuMemFreeHost(p)) })
}

// HostSlice views a HostBuffer as a slice of T (float32, uint16, ...),
// len(Bytes())/sizeof(T) long. The memory from cuMemAllocHost is page
// aligned, so any T is aligned.
func HostSlice[T any](h *HostBuffer) []T {
	var zero T
	sz := int(unsafe.Sizeof(zero))
	if h.p == nil || sz == 0 {
		return nil
	}
	return unsafe.Slice((*T)(h.p), h.size/sz)
}

// AsBytes views a slice of plain values (float32, uint16, ...) as bytes,
// for copies from and to Go memory.
func AsBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}

package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// Stream is a CUstream, a queue of GPU work. Streams made here are
// non-blocking: they do not synchronize with the legacy default stream.
type Stream struct {
	ctx *Context
	h   uintptr

	mu     sync.Mutex
	closed bool
}

// Stream creation flags.
const (
	streamNonBlocking = 0x1
)

// NewStream creates a non-blocking stream (cuStreamCreate with
// CU_STREAM_NON_BLOCKING).
func (c *Context) NewStream() (*Stream, error) {
	var h uintptr
	err := c.do(func() error { return check("cuStreamCreate", drv.cuStreamCreate(&h, streamNonBlocking)) })
	if err != nil {
		return nil, err
	}
	return &Stream{ctx: c, h: h}, nil
}

// Handle returns the CUstream, for libraries that take one (cuDNN, cuBLASLt).
func (s *Stream) Handle() uintptr { return s.h }

// Context returns the stream's context.
func (s *Stream) Context() *Context { return s.ctx }

// Close destroys the stream (cuStreamDestroy_v2) after the work queued on
// it ends. It is idempotent.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.ctx.do(func() error { return check("cuStreamDestroy_v2", drv.cuStreamDestroy(s.h)) })
}

// Synchronize waits until the work queued on the stream is done.
func (s *Stream) Synchronize() error {
	return s.ctx.do(func() error { return check("cuStreamSynchronize", drv.cuStreamSynchronize(s.h)) })
}

// Query reports whether all work queued on the stream is done.
func (s *Stream) Query() (bool, error) {
	var r int32
	err := s.ctx.do(func() error { r = drv.cuStreamQuery(s.h); return nil })
	if err != nil {
		return false, err
	}
	if Result(r) == ErrorNotReady {
		return false, nil
	}
	return r == 0, check("cuStreamQuery", r)
}

// WaitEvent makes later work on the stream wait for e
// (cuStreamWaitEvent).
func (s *Stream) WaitEvent(e *Event) error {
	return s.ctx.do(func() error { return check("cuStreamWaitEvent", drv.cuStreamWaitEvent(s.h, e.h, 0)) })
}

// CopyHtoD queues a copy of src to device address dst
// (cuMemcpyHtoDAsync_v2). From a HostBuffer the copy is asynchronous: src
// must stay untouched until the stream reaches it. From ordinary Go memory
// the driver stages src before returning, so src may be reused at once.
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return s.ctx.do(func() error {
		return check("cuMemcpyHtoDAsync_v2", drv.cuMemcpyHtoDAsync(uint64(dst), unsafe.Pointer(&src[0]), uintptr(len(src)), s.h))
	})
}

// CopyDtoH queues a copy of len(dst) bytes from device address src into
// dst (cuMemcpyDtoHAsync_v2). Into a HostBuffer the copy is asynchronous:
// read dst after synchronizing. Into ordinary Go memory it is complete on
// return.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return s.ctx.do(func() error {
		return check("cuMemcpyDtoHAsync_v2", drv.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), uint64(src), uintptr(len(dst)), s.h))
	})
}

// CopyDtoD queues a copy of n bytes between device addresses
// (cuMemcpyDtoDAsync_v2).
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	if n < 0 {
		return fmt.Errorf("cuda: CopyDtoD of %d bytes", n)
	}
	if n == 0 {
		return nil
	}
	return s.ctx.do(func() error {
		return check("cuMemcpyDtoDAsync_v2", drv.cuMemcpyDtoDAsync(uint64(dst), uint64(src), uintptr(n), s.h))
	})
}

// CopyPeer queues a copy of n bytes from src in srcCtx's device memory to
// dst in dstCtx's (cuMemcpyPeerAsync): GPU to GPU over NVLink or PCIe when
// the contexts have peer access, staged by the driver otherwise.
func (s *Stream) CopyPeer(dst DevicePtr, dstCtx *Context, src DevicePtr, srcCtx *Context, n int) error {
	if n < 0 {
		return fmt.Errorf("cuda: CopyPeer of %d bytes", n)
	}
	if n == 0 {
		return nil
	}
	return s.ctx.do(func() error {
		return check("cuMemcpyPeerAsync", drv.cuMemcpyPeerAsync(uint64(dst), dstCtx.h, uint64(src), srcCtx.h, uintptr(n), s.h))
	})
}

// Memset8 queues setting n bytes at dst to v (cuMemsetD8Async).
func (s *Stream) Memset8(dst DevicePtr, v byte, n int) error {
	if n < 0 {
		return fmt.Errorf("cuda: Memset8 of %d bytes", n)
	}
	if n == 0 {
		return nil
	}
	return s.ctx.do(func() error {
		return check("cuMemsetD8Async", drv.cuMemsetD8Async(uint64(dst), v, uintptr(n), s.h))
	})
}

// Memset32 queues setting n 32-bit words at dst (4-byte aligned) to v
// (cuMemsetD32Async).
func (s *Stream) Memset32(dst DevicePtr, v uint32, n int) error {
	if n < 0 || dst%4 != 0 {
		return fmt.Errorf("cuda: Memset32 of %d words at %#x", n, uint64(dst))
	}
	if n == 0 {
		return nil
	}
	return s.ctx.do(func() error {
		return check("cuMemsetD32Async", drv.cuMemsetD32Async(uint64(dst), v, uintptr(n), s.h))
	})
}

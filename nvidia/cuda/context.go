package cuda

import (
	"runtime"
	"sync"
)

// Context is a retained primary context of one device. It is released by
// Close; resources made from it must be freed before.
type Context struct {
	h   uintptr
	dev Device

	mu     sync.Mutex
	closed bool
}

// PrimaryContext retains the device's primary context
// (cuDevicePrimaryCtxRetain), the one the CUDA runtime and libraries such
// as cuDNN use too. Each call must be paired with Close.
func (d Device) PrimaryContext() (*Context, error) {
	var h uintptr
	if err := check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(&h, int32(d))); err != nil {
		return nil, err
	}
	return &Context{h: h, dev: d}, nil
}

// Device returns the context's device.
func (c *Context) Device() Device { return c.dev }

// Handle returns the CUcontext, for libraries that take one.
func (c *Context) Handle() uintptr { return c.h }

// Close releases the primary context (cuDevicePrimaryCtxRelease). It is
// idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	// The context may be current on this thread; unbind it first so the
	// thread holds no stale handle once the driver destroys it.
	runtime.LockOSThread()
	var cur uintptr
	if drv.cuCtxGetCurrent(&cur) == 0 && cur == c.h {
		drv.cuCtxSetCurrent(0)
	}
	runtime.UnlockOSThread()
	return check("cuDevicePrimaryCtxRelease_v2", drv.cuDevicePrimaryCtxRelease(int32(c.dev)))
}

// SetCurrent binds the context to the calling OS thread (cuCtxSetCurrent).
// It is useful only on a goroutine held with runtime.LockOSThread; see
// LockThread.
func (c *Context) SetCurrent() error {
	return check("cuCtxSetCurrent", drv.cuCtxSetCurrent(c.h))
}

// LockThread wires the calling goroutine to its OS thread and makes the
// context current there. Call the returned unlock (which undoes only the
// thread lock) when the goroutine is done with the GPU:
//
//	unlock, err := ctx.LockThread()
//	if err != nil { ... }
//	defer unlock()
func (c *Context) LockThread() (unlock func(), err error) {
	runtime.LockOSThread()
	if err := c.SetCurrent(); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// enter makes c current on the calling thread for one call: it locks the
// goroutine to its thread and pushes c unless c is current already. Every
// enter must be followed by exit with its result.
func (c *Context) enter() (pushed bool, err error) {
	runtime.LockOSThread()
	var cur uintptr
	if r := drv.cuCtxGetCurrent(&cur); r != 0 {
		runtime.UnlockOSThread()
		return false, check("cuCtxGetCurrent", r)
	}
	if cur == c.h {
		return false, nil
	}
	if r := drv.cuCtxPushCurrent(c.h); r != 0 {
		runtime.UnlockOSThread()
		return false, check("cuCtxPushCurrent_v2", r)
	}
	return true, nil
}

func (c *Context) exit(pushed bool) {
	if pushed {
		var p uintptr
		drv.cuCtxPopCurrent(&p)
	}
	runtime.UnlockOSThread()
}

// Do runs f with c current on the calling thread (pushed for the call and
// popped after, unless it was current already), the goroutine locked to
// its thread meanwhile. Libraries that work on the current context (cuDNN,
// cuBLASLt) call through it. A nil c runs f on whatever is current.
func (c *Context) Do(f func() error) error {
	if c == nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		return f()
	}
	return c.do(f)
}

// do runs f with c current.
func (c *Context) do(f func() error) error {
	pushed, err := c.enter()
	if err != nil {
		return err
	}
	defer c.exit(pushed)
	return f()
}

// Synchronize waits for all work in the context (cuCtxSynchronize).
func (c *Context) Synchronize() error {
	return c.do(func() error { return check("cuCtxSynchronize", drv.cuCtxSynchronize()) })
}

// MemInfo returns the free and total device memory in bytes as the driver
// sees it (cuMemGetInfo).
func (c *Context) MemInfo() (free, total uint64, err error) {
	err = c.do(func() error {
		var f, t uintptr
		if err := check("cuMemGetInfo_v2", drv.cuMemGetInfo(&f, &t)); err != nil {
			return err
		}
		free, total = uint64(f), uint64(t)
		return nil
	})
	return free, total, err
}

// EnablePeerAccess lets this context's kernels and copies reach peer's
// memory (cuCtxEnablePeerAccess). Enabling it twice is not an error.
func (c *Context) EnablePeerAccess(peer *Context) error {
	return c.do(func() error {
		err := check("cuCtxEnablePeerAccess", drv.cuCtxEnablePeerAccess(peer.h, 0))
		if e, ok := err.(*Error); ok && e.Code == ErrorPeerAccessEnabled {
			return nil
		}
		return err
	})
}

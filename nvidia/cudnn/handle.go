package cudnn

import (
	"errors"
	"sync"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

// Handle is a cudnnHandle_t bound to one CUDA context. It is not safe for
// concurrent use; give each stream its own Handle.
type Handle struct {
	h   uintptr
	ctx *cuda.Context

	mu     sync.Mutex
	closed bool
}

// NewHandle loads cuDNN and creates a handle (cudnnCreate) in ctx, the
// context every later call on the handle is made in. Passing a nil ctx
// leaves the context to the caller, who must then keep one current on the
// calling thread (cuda.Context.LockThread) for every call.
func NewHandle(ctx *cuda.Context) (*Handle, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	h := &Handle{ctx: ctx}
	err := h.ctx.Do(func() error { return check("cudnnCreate", lib.cudnnCreate(&h.h)) })
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Context returns the context the handle was made in (nil if none was given).
func (h *Handle) Context() *cuda.Context { return h.ctx }

// Raw returns the cudnnHandle_t.
func (h *Handle) Raw() uintptr { return h.h }

var errClosed = errors.New("cudnn: handle is closed")

// do runs f with the handle's context current.
func (h *Handle) do(f func() error) error {
	if h == nil || h.h == 0 {
		return errClosed
	}
	return h.ctx.Do(f)
}

// SetStream makes the handle queue its work on s (cudnnSetStream); nil
// selects the legacy default stream.
func (h *Handle) SetStream(s *cuda.Stream) error {
	var raw uintptr
	if s != nil {
		raw = s.Handle()
	}
	return h.SetStreamHandle(raw)
}

// SetStreamHandle is SetStream for a raw CUstream / cudaStream_t.
func (h *Handle) SetStreamHandle(stream uintptr) error {
	return h.do(func() error { return check("cudnnSetStream", lib.cudnnSetStream(h.h, stream)) })
}

// Stream returns the CUstream the handle queues work on (0: default stream).
func (h *Handle) Stream() (uintptr, error) {
	var s uintptr
	err := h.do(func() error { return check("cudnnGetStream", lib.cudnnGetStream(h.h, &s)) })
	return s, err
}

// Close destroys the handle (cudnnDestroy). It is idempotent.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.h == 0 {
		return nil
	}
	h.closed = true
	err := h.ctx.Do(func() error { return check("cudnnDestroy", lib.cudnnDestroy(h.h)) })
	h.h = 0
	return err
}

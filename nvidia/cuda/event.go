package cuda

import (
	"sync"
	"time"
)

// EventFlags are cuEventCreate flags.
type EventFlags uint32

// Event creation flags.
const (
	// EventDefault records timing and spins on Synchronize.
	EventDefault EventFlags = 0x0
	// EventBlockingSync makes Synchronize sleep instead of spinning.
	EventBlockingSync EventFlags = 0x1
	// EventDisableTiming makes a lighter event for dependencies only.
	EventDisableTiming EventFlags = 0x2
)

// Event is a CUevent, a marker in a stream's work.
type Event struct {
	ctx *Context
	h   uintptr

	mu     sync.Mutex
	closed bool
}

// NewEvent creates an event (cuEventCreate).
func (c *Context) NewEvent(flags EventFlags) (*Event, error) {
	var h uintptr
	err := c.do(func() error { return check("cuEventCreate", drv.cuEventCreate(&h, uint32(flags))) })
	if err != nil {
		return nil, err
	}
	return &Event{ctx: c, h: h}, nil
}

// Handle returns the CUevent.
func (e *Event) Handle() uintptr { return e.h }

// Record marks the current end of s's queued work (cuEventRecord).
func (e *Event) Record(s *Stream) error {
	return e.ctx.do(func() error { return check("cuEventRecord", drv.cuEventRecord(e.h, s.h)) })
}

// Synchronize waits until the work before the event's record is done.
func (e *Event) Synchronize() error {
	return e.ctx.do(func() error { return check("cuEventSynchronize", drv.cuEventSynchronize(e.h)) })
}

// Query reports whether the work before the event's record is done.
func (e *Event) Query() (bool, error) {
	var r int32
	if err := e.ctx.do(func() error { r = drv.cuEventQuery(e.h); return nil }); err != nil {
		return false, err
	}
	if Result(r) == ErrorNotReady {
		return false, nil
	}
	return r == 0, check("cuEventQuery", r)
}

// ElapsedTime returns the GPU time between two recorded, completed events
// (cuEventElapsedTime, about 0.5 µs resolution).
func ElapsedTime(start, end *Event) (time.Duration, error) {
	var ms float32
	err := start.ctx.do(func() error {
		return check("cuEventElapsedTime", drv.cuEventElapsedTime(&ms, start.h, end.h))
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Close destroys the event (cuEventDestroy_v2). It is idempotent.
func (e *Event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	return e.ctx.do(func() error { return check("cuEventDestroy_v2", drv.cuEventDestroy(e.h)) })
}

package cudnn

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// cuDNN, like every CUDA library, works on the context that is current on
// the calling OS thread. The cuda package keeps its push/pop helpers
// unexported, so this package binds the three driver calls it needs itself
// (libcuda is opened once per process by dl.Load either way).
var cu struct {
	once       sync.Once
	err        error
	getCurrent func(ctx *uintptr) int32
	push       func(ctx uintptr) int32
	pop        func(ctx *uintptr) int32
}

func loadCU() error {
	cu.once.Do(func() {
		lib, err := dl.Load(dl.CUDA)
		if err != nil {
			cu.err = err
			return
		}
		b := lib.Binder()
		b.Bind(&cu.getCurrent, "cuCtxGetCurrent")
		b.Bind(&cu.push, "cuCtxPushCurrent_v2")
		b.Bind(&cu.pop, "cuCtxPopCurrent_v2")
		cu.err = b.Err()
	})
	return cu.err
}

// enter locks the goroutine to its OS thread and makes ctx (a CUcontext)
// current there unless it already is; ctx 0 means the caller manages the
// context. Every enter is followed by exit with its result.
func enter(ctx uintptr) (pushed bool, err error) {
	runtime.LockOSThread()
	if ctx == 0 {
		return false, nil
	}
	if err := loadCU(); err != nil {
		runtime.UnlockOSThread()
		return false, err
	}
	var cur uintptr
	if r := cu.getCurrent(&cur); r != 0 {
		runtime.UnlockOSThread()
		return false, fmt.Errorf("cudnn: cuCtxGetCurrent failed with CUresult %d", r)
	}
	if cur == ctx {
		return false, nil
	}
	if r := cu.push(ctx); r != 0 {
		runtime.UnlockOSThread()
		return false, fmt.Errorf("cudnn: cuCtxPushCurrent_v2 failed with CUresult %d", r)
	}
	return true, nil
}

func exit(pushed bool) {
	if pushed {
		var p uintptr
		cu.pop(&p)
	}
	runtime.UnlockOSThread()
}

// within runs f with ctx current on the calling thread.
func within(ctx uintptr, f func() error) error {
	pushed, err := enter(ctx)
	if err != nil {
		return err
	}
	defer exit(pushed)
	return f()
}

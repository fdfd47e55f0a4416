package cuda

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// Module is a loaded CUmodule: CUBIN or PTX code and its kernels.
type Module struct {
	ctx *Context
	h   uintptr

	mu     sync.Mutex
	closed bool
}

// LoadModule loads a CUBIN, fatbin or PTX image (cuModuleLoadData). PTX is
// compiled for the device by the driver.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuda: LoadModule of an empty image")
	}
	// PTX must end in a NUL; a copy with one appended serves every format.
	buf := make([]byte, len(image)+1)
	copy(buf, image)
	var h uintptr
	err := c.do(func() error {
		return check("cuModuleLoadData", drv.cuModuleLoadData(&h, unsafe.Pointer(&buf[0])))
	})
	runtime.KeepAlive(buf)
	if err != nil {
		return nil, err
	}
	return &Module{ctx: c, h: h}, nil
}

// Function returns the kernel with the given (extern "C" or mangled) name
// (cuModuleGetFunction). The Function belongs to the module and is valid
// until the module is closed.
func (m *Module) Function(name string) (*Function, error) {
	var h uintptr
	err := m.ctx.do(func() error {
		return check("cuModuleGetFunction("+name+")", drv.cuModuleGetFunction(&h, m.h, name))
	})
	if err != nil {
		return nil, err
	}
	return &Function{mod: m, h: h, name: name}, nil
}

// Close unloads the module (cuModuleUnload). It is idempotent.
func (m *Module) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.ctx.do(func() error { return check("cuModuleUnload", drv.cuModuleUnload(m.h)) })
}

// Function is a CUfunction, a kernel of a Module. It is freed with its
// module and has nothing to close itself.
type Function struct {
	mod  *Module
	h    uintptr
	name string
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// FuncAttribute is a CUfunction_attribute.
type FuncAttribute int32

// Function attributes (values from cuda.h).
const (
	FuncMaxThreadsPerBlock        FuncAttribute = 0
	FuncSharedSizeBytes           FuncAttribute = 1
	FuncNumRegs                   FuncAttribute = 4
	FuncMaxDynamicSharedSizeBytes FuncAttribute = 8
)

// Attribute returns a function attribute (cuFuncGetAttribute).
func (f *Function) Attribute(a FuncAttribute) (int, error) {
	var v int32
	err := f.mod.ctx.do(func() error { return check("cuFuncGetAttribute", drv.cuFuncGetAttribute(&v, int32(a), f.h)) })
	return int(v), err
}

// SetAttribute sets a function attribute (cuFuncSetAttribute), e.g.
// FuncMaxDynamicSharedSizeBytes before a launch with more than 48 KiB of
// dynamic shared memory.
func (f *Function) SetAttribute(a FuncAttribute, v int) error {
	return f.mod.ctx.do(func() error { return check("cuFuncSetAttribute", drv.cuFuncSetAttribute(f.h, int32(a), int32(v))) })
}

// Dim3 is a grid or block size; a zero component counts as 1.
type Dim3 struct {
	X, Y, Z uint32 // extents; 0 counts as 1
}

func (d Dim3) norm() Dim3 {
	if d.X == 0 {
		d.X = 1
	}
	if d.Y == 0 {
		d.Y = 1
	}
	if d.Z == 0 {
		d.Z = 1
	}
	return d
}

// LaunchConfig is the geometry and stream of a kernel launch.
type LaunchConfig struct {
	Grid, Block Dim3 // blocks per grid, threads per block
	// SharedMem is the dynamic shared memory per block in bytes.
	SharedMem uint32
	// Stream is the stream to queue on; it must not be nil.
	Stream *Stream
}

// Raw is a kernel argument passed as its bytes, for a struct parameter;
// the bytes must match the C struct's layout.
type Raw []byte

// argBuf is the C-like storage of one launch's parameters: the values,
// copied out of the caller's Go values, and the void* array pointing at
// them. It is pinned for the duration of cuLaunchKernel, which copies the
// values before it returns (so graph capture sees them too).
type argBuf struct {
	vals [maxPooledArgs]uint64
	ptrs [maxPooledArgs]unsafe.Pointer
}

const maxPooledArgs = 32

var argPool = sync.Pool{New: func() any { return new(argBuf) }}

// Launch queues the kernel with the given arguments (cuLaunchKernel). Each
// argument must have the type of the kernel's parameter: DevicePtr or
// *Buffer for pointers, int32/uint32/float32/int64/uint64/float64/
// int8/uint8/int16/uint16/bool (int and uint are 64-bit, as long long in
// the kernel), or Raw for a struct.
func (f *Function) Launch(cfg LaunchConfig, args ...any) error {
	if cfg.Stream == nil {
		return fmt.Errorf("cuda: launching %s without a stream", f.name)
	}
	g, b := cfg.Grid.norm(), cfg.Block.norm()

	var pin runtime.Pinner
	defer pin.Unpin()
	var vals []uint64
	var ptrs []unsafe.Pointer
	if len(args) <= maxPooledArgs {
		ab := argPool.Get().(*argBuf)
		defer func() {
			clear(ab.ptrs[:])
			argPool.Put(ab)
		}()
		vals, ptrs = ab.vals[:len(args)], ab.ptrs[:len(args)]
	} else {
		vals, ptrs = make([]uint64, len(args)), make([]unsafe.Pointer, len(args))
	}
	if len(args) > 0 {
		pin.Pin(&vals[0])
		pin.Pin(&ptrs[0])
	}
	for i, a := range args {
		v, raw, err := argValue(a)
		if err != nil {
			return fmt.Errorf("cuda: launching %s: argument %d: %w", f.name, i, err)
		}
		if raw != nil {
			if len(raw) == 0 {
				return fmt.Errorf("cuda: launching %s: argument %d: empty Raw", f.name, i)
			}
			cp := make([]byte, len(raw))
			copy(cp, raw)
			pin.Pin(&cp[0])
			ptrs[i] = unsafe.Pointer(&cp[0])
			continue
		}
		vals[i] = v
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	var params unsafe.Pointer
	if len(args) > 0 {
		params = unsafe.Pointer(&ptrs[0])
	}
	return f.mod.ctx.do(func() error {
		return check("cuLaunchKernel("+f.name+")", drv.cuLaunchKernel(f.h, g.X, g.Y, g.Z, b.X, b.Y, b.Z, cfg.SharedMem, cfg.Stream.h, params, nil))
	})
}

// argValue returns a scalar argument's bytes in the low end of a uint64
// (little-endian, as the kernel reads sizeof(param) bytes), or a Raw's bytes.
func argValue(a any) (uint64, []byte, error) {
	switch v := a.(type) {
	case DevicePtr:
		return uint64(v), nil, nil
	case *Buffer:
		if v == nil || v.ptr == 0 {
			return 0, nil, fmt.Errorf("nil or freed *Buffer")
		}
		return uint64(v.ptr), nil, nil
	case int32:
		return uint64(uint32(v)), nil, nil
	case uint32:
		return uint64(v), nil, nil
	case float32:
		return uint64(math.Float32bits(v)), nil, nil
	case int64:
		return uint64(v), nil, nil
	case uint64:
		return v, nil, nil
	case int:
		return uint64(v), nil, nil
	case uint:
		return uint64(v), nil, nil
	case uintptr:
		return uint64(v), nil, nil
	case float64:
		return math.Float64bits(v), nil, nil
	case int8:
		return uint64(uint8(v)), nil, nil
	case uint8:
		return uint64(v), nil, nil
	case int16:
		return uint64(uint16(v)), nil, nil
	case uint16:
		return uint64(v), nil, nil
	case bool:
		if v {
			return 1, nil, nil
		}
		return 0, nil, nil
	case Raw:
		return 0, v, nil
	}
	return 0, nil, fmt.Errorf("unsupported type %T", a)
}

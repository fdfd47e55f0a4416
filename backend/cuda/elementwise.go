package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// actArgs returns the bias_act kernel's activation arguments.
func (b *Backend) actArgs(act backend.Activation) (kind int32, alpha float32, slope cu.DevicePtr, nslope int32, err error) {
	switch act.Kind {
	case backend.ActNone:
	case backend.ActReLU:
		kind = 1
	case backend.ActLeaky:
		kind, alpha = 2, act.Alpha
	case backend.ActSoftClamp:
		kind, alpha = 4, act.Alpha
	case backend.ActSiLU:
		kind = 5
	case backend.ActSigmoid:
		kind = 6
	case backend.ActAddScalar:
		kind, alpha = 7, act.Alpha
	case backend.ActMulScalar:
		kind, alpha = 8, act.Alpha
	case backend.ActMish:
		kind = 9
	case backend.ActPReLU:
		st, ok := act.Slope.(*Tensor)
		if !ok || st.f32 == nil {
			return 0, 0, 0, 0, fmt.Errorf("prelu slopes must come from Upload")
		}
		kind, slope, nslope = 3, st.f32.ptr, int32(st.shape.Elems())
	default:
		return 0, 0, 0, 0, fmt.Errorf("unknown activation %d", act.Kind)
	}
	return
}

// biasAct computes y = act(x + bias) (in place when x == y) from the first
// y.C channels of each pixel of x, eight values per thread when the
// channel counts allow.
func (b *Backend) biasAct(x, y *Tensor, bias cu.DevicePtr, kind int32, alpha float32, slope cu.DevicePtr, nslope int32) error {
	n, c, cs := int64(y.shape.Elems()), y.shape.C, x.shape.C
	if c%8 == 0 && cs == c && b.dtype != F32 {
		return b.launch("bias_act8", true, n/8, x.ptr(), y.ptr(), bias, int32(c), n/8, kind, alpha, slope, nslope)
	}
	return b.launch("bias_act", true, n, x.ptr(), y.ptr(), bias, int32(c), int32(cs), n, kind, alpha, slope, nslope)
}

// Activate applies an activation to a copy of x.
func (b *Backend) Activate(xt backend.Tensor, act backend.Activation) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	kind, alpha, slope, nslope, err := b.actArgs(act)
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(x.shape)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.biasAct(x, y, 0, kind, alpha, slope, nslope))
}

// two unwraps two operands.
func (b *Backend) two(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, err := b.tensor(at)
	if err != nil {
		return nil, nil, err
	}
	y, err := b.tensor(bt)
	return x, y, err
}

// anyTwo is two for ops that take float32 tensors too.
func (b *Backend) anyTwo(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, err := b.anyTensor(at)
	if err != nil {
		return nil, nil, err
	}
	y, err := b.anyTensor(bt)
	return x, y, err
}

// pair unwraps the two operands of an elementwise op, of one shape and
// one type (the storage type, or float32 beside it).
func (b *Backend) pair(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, y, err := b.anyTwo(at, bt)
	if err == nil && x.shape != y.shape {
		err = fmt.Errorf("elementwise op on shapes %v and %v", x.shape, y.shape)
	}
	if err == nil {
		err = sameType("elementwise op", x, y)
	}
	return x, y, err
}

// Binary combines two tensors elementwise.
func (b *Backend) Binary(op backend.BinaryOp, at, bt backend.Tensor) (backend.Tensor, error) {
	x, z, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	y, err := b.allocAs(x.shape, x.dt())
	if err != nil {
		return nil, err
	}
	n := int64(x.shape.Elems())
	return b.finish(y, b.launchAs("binary", x.dt(), n, x.ptr(), z.ptr(), y.ptr(), n, int32(op)))
}

// AddScaled computes ca*a + cb*b elementwise.
func (b *Backend) AddScaled(at backend.Tensor, ca float32, bt backend.Tensor, cb float32) (backend.Tensor, error) {
	x, z, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	y, err := b.allocAs(x.shape, x.dt())
	if err != nil {
		return nil, err
	}
	n := int64(x.shape.Elems())
	return b.finish(y, b.launchAs("axpby", x.dt(), n, x.ptr(), z.ptr(), y.ptr(), n, ca, cb))
}

package cpu

import (
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

// slope checks act and returns its PReLU slopes for c channels (nil for
// the other kinds).
func (b *Backend) slope(act backend.Activation, c int) ([]float32, error) {
	if err := check.Activation(act); err != nil {
		return nil, err
	}
	if act.Kind != backend.ActPReLU {
		return nil, nil
	}
	st, err := b.tensor(act.Slope)
	if err != nil {
		return nil, err
	}
	if len(st.Data) != c && len(st.Data) != 1 {
		return nil, fmt.Errorf("prelu: %d slopes for %d channels", len(st.Data), c)
	}
	return st.Data, nil
}

// activate applies act in place to rows of c channels.
func activate(d []float32, c int, act backend.Activation, slope []float32) {
	switch act.Kind {
	case backend.ActReLU:
		for i, v := range d {
			if v < 0 {
				d[i] = 0
			}
		}
	case backend.ActLeaky:
		for i, v := range d {
			if v < 0 {
				d[i] = v * act.Alpha
			}
		}
	case backend.ActSoftClamp:
		for i, v := range d {
			d[i] = softClamp(v, act.Alpha)
		}
	case backend.ActSiLU:
		for i, v := range d {
			d[i] = v * sigmoid(v)
		}
	case backend.ActSigmoid:
		for i, v := range d {
			d[i] = sigmoid(v)
		}
	case backend.ActAddScalar:
		for i, v := range d {
			d[i] = v + act.Alpha
		}
	case backend.ActMulScalar:
		for i, v := range d {
			d[i] = v * act.Alpha
		}
	case backend.ActMish:
		for i, v := range d {
			sp := float64(v)
			if v <= 20 {
				sp = math.Log1p(math.Exp(sp))
			}
			d[i] = float32(float64(v) * math.Tanh(sp))
		}
	case backend.ActPReLU:
		if len(slope) == 1 {
			for i, v := range d {
				if v < 0 {
					d[i] = v * slope[0]
				}
			}
			return
		}
		for i := 0; i < len(d); i += c {
			row := d[i : i+c]
			for j, v := range row {
				if v < 0 {
					row[j] = v * slope[j]
				}
			}
		}
	}
}

// sigmoid is 1 / (1 + exp(-v)), computed in float64 and rounded once.
func sigmoid(v float32) float32 {
	return float32(1 / (1 + math.Exp(-float64(v))))
}

// Activate applies an activation to a copy of x.
func (b *Backend) Activate(xt backend.Tensor, act backend.Activation) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	slope, err := b.slope(act, x.shape.C)
	if err != nil {
		return nil, err
	}
	out := b.alloc(x.shape)
	copy(out.Data, x.Data)
	rows := x.shape.N * x.shape.H
	rowLen := x.shape.W * x.shape.C
	b.parallel(rows, func(r int) {
		activate(out.Data[r*rowLen:(r+1)*rowLen], x.shape.C, act, slope)
	})
	return out, nil
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

// pair unwraps the two operands of an elementwise op, of one shape.
func (b *Backend) pair(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, y, err := b.two(at, bt)
	if err == nil && x.shape != y.shape {
		err = fmt.Errorf("elementwise op on shapes %v and %v", x.shape, y.shape)
	}
	return x, y, err
}

// Binary combines a and b elementwise.
func (b *Backend) Binary(op backend.BinaryOp, at, bt backend.Tensor) (backend.Tensor, error) {
	x, y, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	out := b.alloc(x.shape)
	rows := x.shape.N * x.shape.H
	rowLen := x.shape.W * x.shape.C
	b.parallel(rows, func(r int) {
		o := out.Data[r*rowLen : (r+1)*rowLen]
		p := x.Data[r*rowLen : (r+1)*rowLen]
		q := y.Data[r*rowLen : (r+1)*rowLen]
		switch op {
		case backend.OpAdd:
			for i := range o {
				o[i] = p[i] + q[i]
			}
		case backend.OpSub:
			for i := range o {
				o[i] = p[i] - q[i]
			}
		case backend.OpMul:
			for i := range o {
				o[i] = p[i] * q[i]
			}
		}
	})
	return out, nil
}

// AddScaled computes ca*a + cb*b elementwise.
func (b *Backend) AddScaled(at backend.Tensor, ca float32, bt backend.Tensor, cb float32) (backend.Tensor, error) {
	x, y, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	out := b.alloc(x.shape)
	rowLen := x.shape.W * x.shape.C
	b.parallel(x.shape.N*x.shape.H, func(r int) {
		o := out.Data[r*rowLen : (r+1)*rowLen]
		p := x.Data[r*rowLen : (r+1)*rowLen]
		q := y.Data[r*rowLen : (r+1)*rowLen]
		for i := range o {
			o[i] = ca*p[i] + cb*q[i]
		}
	})
	return out, nil
}

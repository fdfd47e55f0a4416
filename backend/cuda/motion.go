package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

var _ backend.Motion = (*Backend)(nil)

// motionArgs unwraps x and the per-pixel map m of c channels.
func (b *Backend) motionArgs(xt, mt backend.Tensor, c int, what string) (*Tensor, *Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, nil, err
	}
	m, err := b.tensor(mt)
	if err != nil {
		return nil, nil, err
	}
	return x, m, check.Motion(x.shape, m.shape, c, what)
}

// WarpNearest samples x at p + mv(p) (see backend.Motion).
func (b *Backend) WarpNearest(xt, mvt backend.Tensor) (backend.Tensor, error) {
	x, mv, err := b.motionArgs(xt, mvt, 2, "warp: motion field")
	if err != nil {
		return nil, err
	}
	s := x.shape
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("warp_nearest", true, int64(s.Elems()), x.ptr(), mv.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C)))
}

// DeformSample is the modulated deformable sampling (see backend.Motion).
func (b *Backend) DeformSample(xt, ot, mvt backend.Tensor, groups int, limit float32) (backend.Tensor, error) {
	x, mv, err := b.motionArgs(xt, mvt, 2, "deform: motion field")
	if err != nil {
		return nil, err
	}
	s := x.shape
	if groups <= 0 || s.C%groups != 0 {
		return nil, fmt.Errorf("deform: %d channels in %d groups", s.C, groups)
	}
	_, o, err := b.motionArgs(xt, ot, 3*groups, "deform: offsets and masks")
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.launch("deform_sample", true, int64(s.Elems()), x.ptr(), o.ptr(), mv.ptr(), y.ptr(),
		int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(groups), limit))
}

// Gate scales x by (1 + w) or sigmoid(w) (see backend.Motion).
func (b *Backend) Gate(xt, wt backend.Tensor, sigmoid bool) (backend.Tensor, error) {
	x, w, err := b.motionArgs(xt, wt, 1, "gate: map")
	if err != nil {
		return nil, err
	}
	s := x.shape
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	sig := int32(0)
	if sigmoid {
		sig = 1
	}
	return b.finish(y, b.launch("gate", true, int64(s.Elems()), x.ptr(), w.ptr(), y.ptr(), int64(s.N*s.H*s.W), int32(s.C), sig))
}

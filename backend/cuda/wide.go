package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// Float32 tensors beside f16 or bf16 storage (backend.Wide): a Tensor
// with wide set holds float32 values. The kernels they go through are the
// f32 instances of the typed kernels (launchAs with the tensor's dt), and
// copy_channels_A_B between the types.

var (
	_ backend.Wide     = (*Backend)(nil)
	_ backend.WideSlot = (*Slot)(nil)
	_ backend.Owner    = (*Backend)(nil)
)

// Owns reports whether t is a tensor of this backend (not of another GPU's
// or another context's).
func (b *Backend) Owns(t backend.Tensor) bool {
	ct, ok := t.(*Tensor)
	return ok && ct.b == b
}

// EmptyF32 returns an uninitialised float32 tensor.
func (b *Backend) EmptyF32(s backend.Shape) (backend.Tensor, error) {
	if s.Elems() <= 0 {
		return nil, fmt.Errorf("empty tensor of shape %v", s)
	}
	return b.allocAs(s, F32)
}

// UploadF32 makes a float32 tensor from host data, exactly.
func (b *Backend) UploadF32(s backend.Shape, data []float32) (backend.Tensor, error) {
	if len(data) != s.Elems() {
		return nil, fmt.Errorf("upload %v: got %d values", s, len(data))
	}
	t, err := b.allocAs(s, F32)
	if err != nil {
		return nil, err
	}
	if err := b.compute.CopyHtoD(t.ptr(), cu.AsBytes(data)); err != nil {
		t.Free()
		return nil, err
	}
	// The host slice must stay valid until the copy ran.
	return t, b.compute.Synchronize()
}

// Convert returns a copy of x in float32 or in the storage type.
func (b *Backend) Convert(xt backend.Tensor, f32 bool) (backend.Tensor, error) {
	x, err := b.anyTensor(xt)
	if err != nil {
		return nil, err
	}
	dt := b.dtype
	if f32 {
		dt = F32
	}
	y, err := b.allocAs(x.shape, dt)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.copyChannels(x, y, 0))
}

// IsF32 reports whether t holds float32 values.
func (b *Backend) IsF32(t backend.Tensor) bool {
	ct, ok := t.(*Tensor)
	return ok && ct.dt() == F32
}

// copyChannels copies src into channels [at, at+src.C) of dst, converting
// between the types when they differ.
func (b *Backend) copyChannels(src, dst *Tensor, at int) error {
	s := src.shape
	if src.dt() == dst.dt() {
		return b.copyBlock(src, dst, s.N*s.H*s.W, s.C, s.C, 0, dst.shape.C, at)
	}
	px := int64(s.N * s.H * s.W)
	types := src.dt().String() + "_" + dst.dt().String()
	if s.C%8 == 0 && at%8 == 0 && dst.shape.C%8 == 0 && !b.scalarMoves { // 8 channels a thread
		return b.launch("copy_channels8_"+types, false, px*int64(s.C/8),
			src.ptr(), dst.ptr(), px, int32(s.C/8), int32(dst.shape.C), int32(at))
	}
	return b.launch("copy_channels_"+types, false, px*int64(s.C), src.ptr(), dst.ptr(), px, int32(s.C), int32(dst.shape.C), int32(at))
}

// sameType refuses tensors of different types for an op that keeps one.
func sameType(op string, ts ...*Tensor) error {
	for _, t := range ts[1:] {
		if t.dt() != ts[0].dt() {
			return fmt.Errorf("%s: %s and %s tensors (convert one first)", op, ts[0].dt(), t.dt())
		}
	}
	return nil
}

// InputF32 is Input into a float32 tensor.
func (s *Slot) InputF32(n, h, w int, f backend.PixelFormat) (backend.Tensor, error) {
	return s.input(n, h, w, f, F32)
}

package backend

// Wide is implemented by backends whose storage type is narrower than
// float32 (CUDA in f16 or bf16) and that hold float32 tensors beside it:
// the inputs, outputs and recurrent state of a model whose reference keeps
// them in float32 while its layers run in half precision (CDA-VSR, as its
// TensorRT runtime does).
//
// A Wide backend's tensors are of two types, so Wide changes the type
// rules of the ops: only these ops take float32 tensors, and the others
// refuse them: Download, Frames, Channels, CopyFrames (both tensors of one
// type), CopyChannels (converting when the types differ), Resize, Binary
// and AddScaled (all operands of one type, the result of that type), the
// motion fields of Motion's WarpNearest and DeformSample, MeanAbs,
// MatchBlocks (whose results take the type of its planes), and a Slot's
// Put. Each of these ops says so in a "Wide:" note of its doc. A model
// moves a tensor from one type to the other with Convert (or CopyChannels
// into a tensor of the other type).
//
// Callers find the float32 tensors of a backend with WideOf, not with a
// type assertion: a backend may implement Wide and still store float32
// (CUDA in f32), and then it has no second type.
type Wide interface {
	// EmptyF32 is Empty for a float32 tensor.
	EmptyF32(s Shape) (Tensor, error)
	// UploadF32 is Upload into a float32 tensor: the values are kept
	// exactly.
	UploadF32(s Shape, data []float32) (Tensor, error)
	// Convert returns a copy of x in float32 when f32 is set, else in the
	// storage type (rounded to nearest).
	Convert(x Tensor, f32 bool) (Tensor, error)
	// IsF32 reports whether t holds float32 values.
	IsF32(t Tensor) bool
}

// WideSlot is implemented by the Slots of Wide backends.
type WideSlot interface {
	// InputF32 is Input into a float32 tensor.
	InputF32(n, h, w int, f PixelFormat) (Tensor, error)
}

// WideOf returns b's float32 tensors when its storage type is narrower
// than float32, and nil when every tensor of b is float32 already.
func WideOf(b Backend) Wide {
	w, ok := b.(Wide)
	if !ok {
		return nil
	}
	if g, ok := b.(GPU); ok && g.StorageType() == "f32" {
		return nil
	}
	return w
}

package backend

// Motion is implemented by backends that run the ops of recurrent models
// aligned by motion vectors (CDA-VSR): a warp by a motion field, the
// sampling half of a modulated deformable convolution, and a gate. Motion
// fields are (N H W 2) tensors in pixels, channel 0 the x (column) and 1
// the y (row) displacement: pixel p reads the source at p + mv(p).
type Motion interface {
	// WarpNearest samples x (N H W C) at p + mv(p), nearest, with
	// coordinates clamped to the image: PyTorch's grid_sample(nearest,
	// padding_mode=border, align_corners=True) of the grid normalised as
	// g = 2*c/(size-1) - 1 in float32, ties rounding to even.
	WarpNearest(x, mv Tensor) (Tensor, error)
	// DeformSample is the sampling of a 1x1 modulated deformable
	// convolution (mmcv's DCNv2) whose raw offsets o (N H W 3G) are bounded
	// by tanh and added to mv: for group g of G (C/G channels each), the
	// offset is (dy, dx) = limit*tanh(o[2g], o[2g+1]) + (mv.y, mv.x), the
	// mask sigmoid(o[2G+g]); x is sampled bilinearly at p + (dy, dx), a
	// corner outside the image counting as zero (nothing at or beyond -1
	// and H or W), and multiplied by the mask. The 1x1 convolution itself
	// is a Conv2D of the result.
	DeformSample(x, o, mv Tensor, groups int, limit float32) (Tensor, error)
	// Gate scales x (N H W C) by a one-channel map w (N H W 1): x*(1+w), or
	// x*sigmoid(w) when sigmoid is set.
	Gate(x, w Tensor, sigmoid bool) (Tensor, error)
}

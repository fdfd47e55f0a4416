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
	// Wide: mv may be float32.
	WarpNearest(x, mv Tensor) (Tensor, error)
	// DeformSample is the sampling of a 1x1 modulated deformable
	// convolution (mmcv's DCNv2) whose raw offsets o (N H W 3G) are bounded
	// by tanh and added to mv: for group g of G (C/G channels each), the
	// offset is (dy, dx) = limit*tanh(o[2g], o[2g+1]) + (mv.y, mv.x), the
	// mask sigmoid(o[2G+g]); x is sampled bilinearly at p + (dy, dx), a
	// corner outside the image counting as zero (nothing at or beyond -1
	// and H or W), and multiplied by the mask. The 1x1 convolution itself
	// is a Conv2D of the result. Wide: mv may be float32.
	DeformSample(x, o, mv Tensor, groups int, limit float32) (Tensor, error)
	// Gate scales x (N H W C) by a one-channel map w (N H W 1): x*(1+w), or
	// x*sigmoid(w) when sigmoid is set.
	Gate(x, w Tensor, sigmoid bool) (Tensor, error)
	// MatchBlocks estimates the motion of cur from prev (N H W 1 planes)
	// by block matching, as a codec's motion search: for each block x block
	// block of cur, the whole-pixel displacement within rng pixels with the
	// smallest sum of absolute differences over the block widened by half
	// a block on each side (within the image), the zero vector winning ties
	// and then the first in raster order; then refined to half and to
	// quarter pixels among the 8 neighbours, on prev sampled bilinearly with
	// clamped coordinates. mv (N H W 2) gives every pixel its block's vector
	// (p came from p + mv), res (N H W 1) is (cur(p) - prev(p + mv)) * scale.
	// Wide: cur and prev may both be float32; mv and res are then float32.
	MatchBlocks(cur, prev Tensor, block, rng int, scale float32) (mv, res Tensor, err error)
	// MeanAbs returns the mean absolute value of each tensor (summed in
	// float64, in a fixed order): the scene-cut statistic of residuals,
	// for a batch of frames with one wait for the device.
	// Wide: any of ts may be float32.
	MeanAbs(ts ...Tensor) ([]float64, error)
}

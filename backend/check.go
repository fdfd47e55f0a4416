package backend

import "fmt"

// Checks every backend makes on its arguments, in one place so that all of
// them accept and refuse the same calls with the same messages.

// CheckConvWeights validates PrepareConv's arguments.
func CheckConvWeights(out, in, kh, kw int, w, bias []float32) error {
	if out <= 0 || in <= 0 || kh <= 0 || kw <= 0 || len(w) != out*in*kh*kw {
		return fmt.Errorf("conv weights %dx%dx%dx%d: got %d values", out, in, kh, kw, len(w))
	}
	if bias != nil && len(bias) != out {
		return fmt.Errorf("conv bias: want %d values, got %d", out, len(bias))
	}
	return nil
}

// ConvOutput checks that an input of shape s fits a convolution with in
// input channels and a kh x kw kernel, and returns the output size.
func ConvOutput(s Shape, p ConvParams, in, kh, kw int) (oh, ow int, err error) {
	if s.C != in || p.KH != kh || p.KW != kw {
		return 0, 0, fmt.Errorf("conv: input has %d channels, kernel %dx%d; weights want %d channels, kernel %dx%d", s.C, p.KH, p.KW, in, kh, kw)
	}
	oh, ow = p.OutSize(s.H, s.W)
	if oh <= 0 || ow <= 0 {
		return 0, 0, fmt.Errorf("conv: input %dx%d is too small for a %dx%d kernel", s.H, s.W, p.KH, p.KW)
	}
	return oh, ow, nil
}

// ResizeWindows checks a Resize of an s-shaped tensor to oh x ow and
// returns its windows with zero ones filled in as whole images.
func ResizeWindows(s Shape, mode ResizeMode, oh, ow int, src, dst Window) (Window, Window, error) {
	if mode < Nearest || mode > Bicubic {
		return src, dst, fmt.Errorf("resize: unsupported mode %v", mode)
	}
	if oh <= 0 || ow <= 0 {
		return src, dst, fmt.Errorf("resize %dx%d to %dx%d: empty output", s.W, s.H, ow, oh)
	}
	if src.Whole() {
		src = Window{FullH: s.H, FullW: s.W}
	}
	if dst.Whole() {
		dst = Window{FullH: oh, FullW: ow}
	}
	return src, dst, nil
}

// FramesShape checks Frames(x, start, n) on an s-shaped x.
func FramesShape(s Shape, start, n int) (Shape, error) {
	if start < 0 || n <= 0 || start+n > s.N {
		return Shape{}, fmt.Errorf("frames [%d, %d) of a %d-frame tensor", start, start+n, s.N)
	}
	return Shape{N: n, H: s.H, W: s.W, C: s.C}, nil
}

// ConcatShape checks ConcatFrames of tensors of the given shapes.
func ConcatShape(shapes []Shape) (Shape, error) {
	if len(shapes) == 0 {
		return Shape{}, fmt.Errorf("concat of no tensors")
	}
	out := shapes[0]
	for _, p := range shapes[1:] {
		if p.H != out.H || p.W != out.W || p.C != out.C {
			return Shape{}, fmt.Errorf("concat of frames %v and %v", shapes[0], p)
		}
		out.N += p.N
	}
	return out, nil
}

// CheckCopyFrames checks CopyFrames(dst, at, src) on tensors of these shapes.
func CheckCopyFrames(dst Shape, at int, src Shape) error {
	if src.H != dst.H || src.W != dst.W || src.C != dst.C || at < 0 || at+src.N > dst.N {
		return fmt.Errorf("copy of frames %v into frames [%d, %d) of %v", src, at, at+src.N, dst)
	}
	return nil
}

// ConcatPrevShape checks ConcatPrev(x, prev); prev may be nil.
func ConcatPrevShape(s Shape, prev *Shape) (Shape, error) {
	if prev != nil && *prev != (Shape{N: 1, H: s.H, W: s.W, C: s.C}) {
		return Shape{}, fmt.Errorf("previous frame %v does not fit frames %v", *prev, s)
	}
	return Shape{N: s.N, H: s.H, W: s.W, C: 2 * s.C}, nil
}

// FoldShape checks FoldFrames(x, st).
func FoldShape(s Shape, st int) (Shape, error) {
	if st <= 0 || s.N%st != 0 {
		return Shape{}, fmt.Errorf("fold %d frames by %d", s.N, st)
	}
	return Shape{N: s.N / st, H: s.H, W: s.W, C: s.C * st}, nil
}

// UnfoldShape checks UnfoldFrames(x, st).
func UnfoldShape(s Shape, st int) (Shape, error) {
	if st <= 0 || s.C%st != 0 {
		return Shape{}, fmt.Errorf("unfold %d channels by %d", s.C, st)
	}
	return Shape{N: s.N * st, H: s.H, W: s.W, C: s.C / st}, nil
}

// UnshuffleShape checks PixelUnshuffle(x, r).
func UnshuffleShape(s Shape, r int) (Shape, error) {
	if r <= 0 || s.H%r != 0 || s.W%r != 0 {
		return Shape{}, fmt.Errorf("pixel unshuffle by %d: %dx%d is not a multiple", r, s.W, s.H)
	}
	return Shape{N: s.N, H: s.H / r, W: s.W / r, C: s.C * r * r}, nil
}

// CropPadShape checks CropPad(x, h, w).
func CropPadShape(s Shape, h, w int) (Shape, error) {
	if h <= 0 || w <= 0 {
		return Shape{}, fmt.Errorf("crop/pad to %dx%d", w, h)
	}
	return Shape{N: s.N, H: h, W: w, C: s.C}, nil
}

// ShuffleAddShape checks ShuffleAddNearest(x, base, r).
func ShuffleAddShape(x, base Shape, r int) (Shape, error) {
	if r <= 0 || x.C != base.C*r*r || x.N != base.N || x.H != base.H || x.W != base.W {
		return Shape{}, fmt.Errorf("shuffle-add: shapes %v and %v do not fit r=%d", x, base, r)
	}
	return Shape{N: x.N, H: x.H * r, W: x.W * r, C: base.C}, nil
}

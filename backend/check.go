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

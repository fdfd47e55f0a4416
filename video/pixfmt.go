package video

import (
	"fmt"
	"strings"
)

// FrameSize returns the number of bytes of one raw frame of w x h pixels in
// pixFmt, as ffmpeg's rawvideo format lays it out (planes back to back, no
// padding, chroma planes rounded up). Supported: "rgb24", "bgr24", "rgba",
// "bgra", "argb", "abgr", "rgb0", "bgr0", "gray", "gbrp", "yuv444p",
// "yuv422p", "yuv420p", "nv12", and with 16-bit words "rgb48le"/"be",
// "bgr48le"/"be", "gbrp16le"/"be", "yuv444p", "yuv422p" and "yuv420p" with
// 10le, 12le or 16le, "p010le", "p016le".
func FrameSize(pixFmt string, w, h int) (int, error) {
	if w <= 0 || h <= 0 {
		return 0, fmt.Errorf("frame size %dx%d is not valid: width and height must be positive", w, h)
	}
	cw, ch := (w+1)/2, (h+1)/2
	switch pixFmt { // 16-bit words: twice the 8-bit layout
	case "rgb48le", "rgb48be", "bgr48le", "bgr48be", "gbrp16le", "gbrp16be", "yuv444p10le", "yuv444p12le", "yuv444p16le":
		return 2 * w * h * 3, nil
	case "yuv422p10le", "yuv422p12le", "yuv422p16le":
		return 2 * (w*h + 2*cw*h), nil
	case "yuv420p10le", "yuv420p12le", "yuv420p16le", "p010le", "p016le":
		return 2 * (w*h + 2*cw*ch), nil
	}
	switch pixFmt {
	case "rgb24", "bgr24", "gbrp", "yuv444p":
		return w * h * 3, nil
	case "rgba", "bgra", "argb", "abgr", "rgb0", "bgr0", "0rgb", "0bgr":
		return w * h * 4, nil
	case "gray":
		return w * h, nil
	case "yuv422p":
		return w*h + 2*cw*h, nil
	case "yuv420p", "nv12":
		return w*h + 2*cw*ch, nil
	}
	return 0, fmt.Errorf("raw pixel format %q is not supported: use rgb24, rgb48le or yuv420p", pixFmt)
}

// chromaAlign returns the multiples the width and height must be of for
// pixFmt's chroma subsampling (1 when unconstrained).
func chromaAlign(pixFmt string) (int, int) {
	p := strings.ToLower(pixFmt)
	switch {
	case strings.Contains(p, "410"):
		return 4, 4
	case strings.Contains(p, "411"):
		return 4, 1
	case strings.Contains(p, "420"), strings.HasPrefix(p, "nv12"), strings.HasPrefix(p, "nv21"),
		strings.HasPrefix(p, "p010"), strings.HasPrefix(p, "p016"), strings.HasPrefix(p, "p012"):
		return 2, 2
	case strings.Contains(p, "422"), strings.HasPrefix(p, "nv16"), strings.HasPrefix(p, "nv20"),
		strings.HasPrefix(p, "p210"), strings.HasPrefix(p, "p216"):
		return 2, 1
	}
	return 1, 1
}

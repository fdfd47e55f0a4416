package pipeline

import (
	"cmp"
	"context"
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/video"
)

// Bit depth and pixel formats along the pipeline: an input of more than 8
// bits a sample reaches the model at 16 bits. YCbCr input is decoded in its
// own layout when it is yuv420p, yuv422p or yuv444p of 10, 12 or 16 bits
// (no conversion in ffmpeg: the backend upsamples the chroma, bilinear, at
// the input's chroma location, and converts to RGB with its matrix and
// range where the model runs; see backend.Siting), other YCbCr as
// yuv444p16le (its samples shifted, exactly, and converted likewise;
// ffmpeg's own conversion to 16-bit RGB is about 0.4% off in scale), RGB
// and gray input as rgb48le;
// the model's frames leave the backend in the encoder's pixel format when
// a backend writes it (backend.ParsePixelFormat: yuv420p, and 10, 12 and
// 16-bit yuv420p/yuv444p), converted with the input's YCbCr matrix and
// range, else as rgb24 or rgb48le (by the encoder's depth), which ffmpeg
// converts. A YCbCr matrix the backends do not convert (smpte240m, fcc,
// ycgco: backend.ParseYCbCr) is left to ffmpeg both ways: the input is
// decoded as rgb24 or rgb48le, and the output leaves as RGB.

// InputDepth is the bits a sample of info's video: Info.Depth, or when
// that is unset, the depth its pixel format names.
func InputDepth(info *video.Info) int {
	if info.Depth > 0 {
		return info.Depth
	}
	d, _, _, _ := video.PixFmtInfo(info.PixFmt)
	return d
}

// DefaultPixFmt is the output pixel format when none is asked for:
// yuv420p for an 8-bit input; for a deeper one, YUV of its depth (10, 12
// or 16 bits) and chroma subsampling (4:2:0, 4:2:2, else 4:4:4; RGB input
// gives 4:4:4), e.g. yuv420p10le for a 10-bit 4:2:0 input.
func DefaultPixFmt(info *video.Info) string {
	d := InputDepth(info)
	if d <= 8 {
		return "yuv420p"
	}
	chroma, rgb := info.Chroma, false
	if chroma == "" {
		_, chroma, rgb, _ = video.PixFmtInfo(info.PixFmt)
	}
	sub := "444"
	switch {
	case rgb:
	case chroma == "4:2:0":
		sub = "420"
	case chroma == "4:2:2":
		sub = "422"
	}
	bits := 16
	switch {
	case d <= 10:
		bits = 10
	case d <= 12:
		bits = 12
	}
	return fmt.Sprintf("yuv%sp%dle", sub, bits)
}

// EncodablePixFmt is the output pixel format when none is asked for, for
// an output of extension ext encoded with enc (its PixFmt ignored):
// DefaultPixFmt(info) when the encoder takes it (its pixel format list
// and video.CheckEncode), else
// the deepest format at or below it that the encoder takes, its chroma
// subsampling first, then coarser (4:4:4, 4:2:2, 4:2:0) and shallower (16,
// 12, 10 bits), finally yuv420p; with a drop saying the depth was reduced
// and why (nil when it was not). When the list has none of them but
// CheckEncode passes the default, it is the default (ffmpeg converts it to
// a format of the encoder's); the error is CheckEncode's on the default
// when it fails and the encoder takes none of them.
func EncodablePixFmt(ctx context.Context, ext string, enc video.EncodeOptions, info *video.Info) (string, *video.Drop, error) {
	def := DefaultPixFmt(info)
	enc.PixFmt = def
	if def == "yuv420p" {
		return def, nil, nil
	}
	takes := video.EncoderPixFmts(ctx, cmp.Or(enc.Codec, video.DefaultCodec(ctx, ext)))
	err := video.CheckEncode(ctx, ext, enc)
	if err == nil && takes(def) {
		return def, nil, nil
	}
	d, chroma, _, _ := video.PixFmtInfo(def)
	subs := []string{"444", "422", "420"}
	switch chroma {
	case "4:2:2":
		subs = subs[1:]
	case "4:2:0":
		subs = subs[2:]
	}
	var tries []string
	for _, bits := range []int{16, 12, 10} {
		for _, sub := range subs {
			if bits <= d && fmt.Sprintf("yuv%sp%dle", sub, bits) != def {
				tries = append(tries, fmt.Sprintf("yuv%sp%dle", sub, bits))
			}
		}
	}
	for _, pf := range append(tries, "yuv420p") {
		enc.PixFmt = pf
		if takes(pf) && video.CheckEncode(ctx, ext, enc) == nil {
			return pf, &video.Drop{What: def, Why: fmt.Sprintf("encoder %s does not take it: reduced to %s; choose another --codec to keep it", cmp.Or(enc.Codec, "default"), pf)}, nil
		}
	}
	if err == nil { // none of these YCbCr formats is in the list (an RGB or image encoder): ffmpeg chooses
		return def, nil, nil
	}
	return "", nil, err
}

// formats is how frames travel for one video: the decoder's pixel format,
// the model's input and the backend's output (the encoder's input).
type formats struct {
	decode  string
	in, out backend.PixelFormat
}

// frameFormats chooses the formats for info's video restored to ow x oh
// frames and encoded in pixFmt ("" is DefaultPixFmt).
func frameFormats(info *video.Info, pixFmt string, ow, oh int) formats {
	f := formats{decode: "rgb24", in: backend.RGB24, out: backend.RGB24}
	c, known := backend.ParseYCbCr(info.Colour.Matrix, info.Colour.Range)
	if InputDepth(info) > 8 {
		if rgbInput(info) || !known {
			f.decode, f.in = "rgb48le", backend.RGB48
		} else {
			f.decode, f.in = "yuv444p16le", backend.YUV16(c)
			if d := InputDepth(info); d < 16 {
				f.in.Source = d // shifted, its range kept (video.NewDecoder)
			}
			if in, ok := backend.ParseInput(info.PixFmt, c, backend.ParseSiting(info.Colour.ChromaLocation)); ok {
				f.decode, f.in = info.PixFmt, in
			}
		}
	}
	if pixFmt == "" {
		pixFmt = DefaultPixFmt(info)
	}
	oc := outputColour(info)
	oy, known := backend.ParseYCbCr(oc.Matrix, oc.Range)
	if out, ok := backend.ParsePixelFormat(pixFmt, oy); ok && known && out.CheckSize(ow, oh) == nil {
		f.out = out
	} else if d, _, _, _ := video.PixFmtInfo(pixFmt); d > 8 {
		f.out = backend.RGB48
	}
	return f
}

// OutputFormat is the format the backends write w x h frames in for an
// encoder taking pixFmt ("" is yuv420p) from an 8-bit input of unspecified
// colour: what a service warms up.
func OutputFormat(pixFmt string, w, h int) backend.PixelFormat {
	return frameFormats(&video.Info{PixFmt: "yuv420p"}, cmp.Or(pixFmt, "yuv420p"), w, h).out
}

// rgbInput reports whether info's samples are RGB (or gray), not YCbCr.
func rgbInput(info *video.Info) bool {
	_, _, rgb, _ := video.PixFmtInfo(info.PixFmt)
	return rgb || info.Colour.Matrix == "gbr"
}

// outputColour is the colour description of info's restored frames: the
// input's, less the matrix, range and chroma siting of an RGB input, which
// a YCbCr output does not share (it gets BT.601 limited range, untagged).
func outputColour(info *video.Info) video.Colour {
	c := info.Colour
	if rgbInput(info) {
		c.Matrix, c.Range, c.ChromaLocation = "", "", ""
	}
	return c
}

// liveFormats are the formats of a live stream encoded in pixFmt, with
// the output's colour c (liveColour): a source is not probed, so its
// frames come decoded as rgb24, or as rgb48le when pixFmt is deeper than
// 8 bits, and a YCbCr output is converted with c's matrix and range.
func liveFormats(pixFmt string, c video.Colour, ow, oh int) formats {
	src := "rgb24"
	if d, _, _, _ := video.PixFmtInfo(pixFmt); d > 8 {
		src = "rgb48le"
	}
	f := frameFormats(&video.Info{PixFmt: src}, pixFmt, ow, oh)
	if f.out.Layout != backend.PackedRGB {
		f.out.YCbCr, _ = backend.ParseYCbCr(c.Matrix, c.Range)
	}
	return f
}

// liveColour is the colour of a live output whose source has colour c
// (primaries and transfer: its frames are RGB): with primaries, c with the
// matrix they imply (bt709 for bt709, bt2020nc for bt2020, else smpte170m,
// BT.601) and limited range, tagged so that players need not guess; an
// untagged source gives an untagged output (BT.601), as a file does.
func liveColour(c video.Colour) video.Colour {
	if c.Primaries == "" || c.Primaries == "unknown" {
		return c
	}
	c.Matrix, c.Range = "smpte170m", "tv"
	switch c.Primaries {
	case "bt709":
		c.Matrix = "bt709"
	case "bt2020":
		c.Matrix = "bt2020nc"
	}
	return c
}

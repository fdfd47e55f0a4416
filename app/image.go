package app

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

// imageFormats are the still-image outputs: the encoder and pixel format
// each extension gets, the pixel format of an input deeper than 8 bits
// where the format holds 16 (deep), and its encoder options.
var imageFormats = map[string]struct {
	codec, pixFmt, deep string
	opts                []string
}{
	".png":  {"png", "rgb24", "rgb48be", nil},
	".jpg":  {"mjpeg", "yuvj444p", "", []string{"q:v=2"}},
	".jpeg": {"mjpeg", "yuvj444p", "", []string{"q:v=2"}},
	".webp": {"libwebp", "yuv420p", "", []string{"quality=95"}},
	".bmp":  {"bmp", "bgr24", "", nil},
	".tif":  {"tiff", "rgb24", "rgb48le", nil},
	".tiff": {"tiff", "rgb24", "rgb48le", nil},
}

// deepImage is e for an image output of extension ext from info's input:
// 16-bit where the format holds it and the input is deeper than 8 bits.
func deepImage(ext string, e video.EncodeOptions, info *video.Info) video.EncodeOptions {
	if f := imageFormats[strings.ToLower(ext)]; f.deep != "" && e.PixFmt == f.pixFmt && pipeline.InputDepth(info) > 8 {
		e.PixFmt = f.deep
	}
	return e
}

// IsImage reports whether a file of extension ext is a still image vsr
// writes (PNG, JPEG, WebP, BMP, TIFF).
func IsImage(ext string) bool {
	_, ok := imageFormats[strings.ToLower(ext)]
	return ok
}

// ImageEncode returns the encoder settings for a still image of extension
// ext: the image's own encoder and pixel format in place of the video
// ones, one picture written in place (no frame number in the name).
func ImageEncode(ext string, e video.EncodeOptions) (video.EncodeOptions, error) {
	f, ok := imageFormats[strings.ToLower(ext)]
	if !ok {
		return e, fmt.Errorf("%q is not an image extension vsr writes (.png, .jpg, .webp, .bmp, .tif)", ext)
	}
	e.Codec, e.PixFmt, e.CRF, e.Preset, e.NoAudio = f.codec, f.pixFmt, -1, "", true
	e.Options = append(append([]string{"update=1"}, f.opts...), e.Options...)
	return e, nil
}

// isImageInput reports whether the probed input is a still image: read by
// an image demuxer, or named as one (the service hands inputs over as
// descriptors, without their names).
func isImageInput(info *video.Info) bool {
	return strings.HasSuffix(info.Format, "_pipe") || info.Format == "image2" || IsImage(filepath.Ext(info.Path))
}

// alphaFormats are the pixel formats with alpha that an image output
// takes in place of its own (see imageFormats) to keep alpha: PNG's and
// TIFF's RGB, WebP's YUV. The others (JPEG, BMP) keep none.
var alphaFormats = map[string]string{
	"rgb24": "rgba", "rgb48be": "rgba64be", "rgb48le": "rgba64le",
	"yuv420p": "yuva420p", "yuv422p": "yuva422p", "yuv444p": "yuva444p", "gbrp": "gbrap",
}

// PrepareImage readies the restore of info, a still image or the first
// frame of a video written as one, into a file of extension ext with the
// encoder settings e. It returns the Info to decode, the encoder
// settings, and one-line notices of what the output cannot keep:
//   - alpha: an input whose alpha has a pixel below opaque (the values
//     decide, not the pixel format: a lossless WebP decodes as argb even
//     when opaque) keeps it upscaled by bicubic interpolation (as
//     realesrgan-ncnn-vulkan does; see video.EncodeOptions.AlphaFrom)
//     where the output can (PNG, WebP and TIFF images, or a video pixel
//     format with alpha), and is flattened on white with a notice where it
//     cannot (JPEG, BMP);
//   - EXIF orientation (a JPEG's): the Info returned is turned upright
//     (Orientation set, Width and Height swapped for a quarter turn), so
//     the output is upright and carries no orientation;
//   - ICC profile: written into PNG, JPEG and WebP outputs; any other gets
//     a notice that it does not carry it.
//
// The colour still goes through the model as RGB; an error is a file
// that cannot be read.
func PrepareImage(ctx context.Context, info *video.Info, ext string, e video.EncodeOptions) (*video.Info, video.EncodeOptions, []string, error) {
	var notes []string
	up := *info
	if isImageInput(info) {
		meta, err := video.ReadImageMeta(info.Path)
		if err != nil {
			return nil, e, nil, err
		}
		if meta.Orientation > 1 && info.Orientation == 0 { // not yet turned
			up.Orientation = meta.Orientation
			if meta.Orientation >= 5 {
				up.Width, up.Height = info.Height, info.Width
			}
		}
		if meta.ICC != nil {
			if video.CanEmbedICC(strings.ToLower(ext)) {
				e.ICC = meta.ICC
			} else {
				notes = append(notes, fmt.Sprintf("%s has an ICC colour profile, which vsr cannot write into %s files (PNG, JPEG and WebP carry it): not carried", info.Path, ext))
			}
		}
	}
	alpha, err := translucent(ctx, info)
	if err != nil || !alpha {
		return &up, e, notes, err
	}
	e.AlphaFrom = &up
	if a, ok := alphaFormats[e.PixFmt]; ok && IsImage(ext) {
		e.PixFmt = a
	}
	if _, _, _, keeps := video.PixFmtInfo(e.PixFmt); !keeps {
		notes = append(notes, fmt.Sprintf("%s has transparency, which a %s output cannot keep: flattened on white (write .png, .webp or .tif to keep it)", info.Path, ext))
	}
	return &up, e, notes, nil
}

// translucent reports whether the first frame of info has a pixel whose
// alpha is below opaque (false for a pixel format without alpha).
func translucent(ctx context.Context, info *video.Info) (bool, error) {
	if _, _, _, alpha := video.PixFmtInfo(info.PixFmt); !alpha {
		return false, nil
	}
	d, err := video.NewDecoder(ctx, info, video.DecodeOptions{MaxFrames: 1, PixFmt: "rgba"})
	if err != nil {
		return false, err
	}
	defer d.Close()
	buf := make([]byte, d.FrameSize())
	if err := d.Read(buf); err != nil {
		return false, err
	}
	for i := 3; i < len(buf); i += 4 {
		if buf[i] != 255 {
			return true, nil
		}
	}
	return false, nil
}

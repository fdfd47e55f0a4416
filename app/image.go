package app

import (
	"fmt"
	"path/filepath"
	"slices"
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

// CheckImageInput refuses an image whose alpha channel the restore would
// lose.
func CheckImageInput(info *video.Info) error {
	pf := info.PixFmt
	if slices.ContainsFunc([]string{"rgba", "bgra", "argb", "abgr", "ya", "yuva", "gbrap"}, func(p string) bool { return strings.HasPrefix(pf, p) }) {
		return fmt.Errorf("%s has an alpha channel (%s) that vsr would drop: flatten it first (ffmpeg -i IN -vf format=rgb24 OUT.png), or restore a copy without it", info.Path, pf)
	}
	return nil
}

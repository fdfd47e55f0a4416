package video

import (
	"context"
	"strings"
)

// containerCodecs are the video encoders for outputs of an extension, in
// order of preference, where libx264 (the default elsewhere) is not
// among what the container takes: as ffmpeg picks its default encoder
// per container.
var containerCodecs = map[string][]string{
	".webm": {"libvpx-vp9", "libvpx", "libaom-av1", "libsvtav1"},
	".ogv":  {"libtheora", "libvpx"},
	".ogg":  {"libtheora", "libvpx"},
}

// DefaultCodec is the video encoder for an output of extension ext when
// none is named: for WebM, libvpx-vp9 (else libvpx, libaom-av1 or
// libsvtav1, the first this ffmpeg has); for Ogg, libtheora (else
// libvpx); libx264 for the others (MP4, Matroska, MOV, AVI, MPEG-TS,
// FLV). When ffmpeg has none of a container's encoders, or cannot be
// asked, it is the first, and checking the encoder names the problem.
func DefaultCodec(ctx context.Context, ext string) string {
	list, ok := containerCodecs[strings.ToLower(ext)]
	if !ok {
		return "libx264"
	}
	if t, err := resolveTools(); err == nil {
		have := encoders(ctx, t.ffmpeg)
		for _, c := range list {
			if have[c] {
				return c
			}
		}
	}
	return list[0]
}

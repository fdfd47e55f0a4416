package video

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Errors wrapped (see errors.Is) by the errors Probe and ProbeHeader return
// for inputs they refuse before decoding them.
var (
	// ErrFormat: ffmpeg reads the file with a demuxer vsr does not open by
	// default: a playlist or list of files (hls, dash, concat), which can
	// make ffmpeg open other files and URLs, or a format that is no video
	// container or image vsr reads (see ProbeOptions.AllowPlaylists).
	ErrFormat = errors.New("input format not allowed")
	// ErrLimit: the input is over one of the Limits.
	ErrLimit = errors.New("input over a limit")
)

// allowedFormats are the demuxers, by ffmpeg's names, that read an input
// file by default: video containers and raw video streams that hold their
// media themselves, and the still images vsr restores (PNG, JPEG, WebP,
// BMP, TIFF). None of them opens another file or URL. Left out on purpose:
// hls, dash, concat (ffconcat), image2 (file name patterns), imf,
// webm_dash_manifest, sdp, rtsp, lavfi, and every other demuxer.
var allowedFormats = []string{
	"mov", "matroska", "avi", "flv", "mpegts", "mpeg", "mpegvideo", "m4v", "h264", "hevc",
	"ivf", "obu", "ogg", "asf", "nut", "mxf", "dv", "gif", "apng", "yuv4mpegpipe", "mjpeg",
	"png_pipe", "jpeg_pipe", "webp_pipe", "bmp_pipe", "tiff_pipe",
}

// listFormats are demuxers that read lists of other files or URLs, named
// as such in the refusal.
var listFormats = []string{"hls", "dash", "concat", "image2", "imf", "webm_dash_manifest", "sdp", "rtsp", "lavfi"}

// ProbeOptions controls how Probe and ProbeHeader open and bound an input.
// The zero value is the safe default for untrusted files.
type ProbeOptions struct {
	// AllowPlaylists lets ffmpeg read the input with any demuxer and open
	// whatever it names, through any protocol: HLS and DASH playlists,
	// concat lists, image sequences, and files anywhere or URLs they name.
	// Only for inputs whose every line is trusted (the CLI's
	// --allow-playlists). Without it, ffmpeg opens the input file alone
	// (the file protocol), read by one of allowedFormats' demuxers, and
	// anything else is refused with ErrFormat.
	AllowPlaylists bool
	// Limits bound the input (see Limits; zero fields take DefaultLimits').
	Limits Limits
}

// Limits bound what Probe accepts, so that an absurd input is refused with
// ErrLimit in a second rather than taking memory and hours later. A zero
// field takes DefaultLimits' value; a negative one means no limit.
type Limits struct {
	// MaxWidth and MaxHeight bound the size of the decoded frames, and
	// MaxPixels their area (width x height), in pixels.
	MaxWidth, MaxHeight int
	MaxPixels           int64
	// MaxFrames bounds the video's frames: those its container declares,
	// and those Probe counts (the count stops past the limit).
	MaxFrames int
	// MaxDuration bounds the container's duration.
	MaxDuration time.Duration
	// MaxStreams bounds the file's streams of every kind.
	MaxStreams int
}

// DefaultLimits are the limits of a zero Limits: 16384 pixels a side and
// 2^27 a frame (16384x8192; 8K UHD is 33 million), 2 million frames (over
// 9 hours at 60 frames a second), 48 hours (past the 26.5 hours that an
// MPEG-TS capture whose timestamps wrapped can claim), 64 streams.
var DefaultLimits = Limits{
	MaxWidth: 16384, MaxHeight: 16384, MaxPixels: 1 << 27,
	MaxFrames: 2_000_000, MaxDuration: 48 * time.Hour, MaxStreams: 64,
}

// withDefaults fills l's zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v, def int) int {
		if v == 0 {
			return def
		}
		return v
	}
	l.MaxWidth, l.MaxHeight = pick(l.MaxWidth, d.MaxWidth), pick(l.MaxHeight, d.MaxHeight)
	l.MaxFrames, l.MaxStreams = pick(l.MaxFrames, d.MaxFrames), pick(l.MaxStreams, d.MaxStreams)
	if l.MaxPixels == 0 {
		l.MaxPixels = d.MaxPixels
	}
	if l.MaxDuration == 0 {
		l.MaxDuration = d.MaxDuration
	}
	return l
}

// check refuses info (its header: size, duration, declared frames) or
// its stream count when over l (with defaults filled in).
func (l Limits) check(info *Info, streams int) error {
	name := strconv.Quote(info.Path)
	over := func(what string, v, max int64) error {
		return kindErrorf(ErrLimit, "%s: its %s is over the limit of %d: vsr refuses inputs this large", name, fmt.Sprintf(what, v), max)
	}
	if err := l.checkSize(name, info.Width, info.Height); err != nil {
		return err
	}
	switch {
	case l.MaxStreams > 0 && streams > l.MaxStreams:
		return over("count of %d streams", int64(streams), int64(l.MaxStreams))
	case l.MaxFrames > 0 && info.DeclaredFrames > l.MaxFrames:
		return over("declared count of %d frames", int64(info.DeclaredFrames), int64(l.MaxFrames))
	case l.MaxDuration > 0 && info.Duration > l.MaxDuration.Seconds():
		return kindErrorf(ErrLimit, "%q: its duration of %.0f s is over the limit of %s: vsr refuses inputs this long", info.Path, info.Duration, l.MaxDuration)
	}
	return nil
}

// checkSize refuses frames of w x h over l's size limits; name names the
// input in the message.
func (l Limits) checkSize(name string, width, height int) error {
	w, h := int64(width), int64(height)
	over := func(what string, v, max int64) error {
		return kindErrorf(ErrLimit, "%s: its %s of %d pixels is over the limit of %d: vsr refuses inputs this large", name, what, v, max)
	}
	switch {
	case l.MaxWidth > 0 && w > int64(l.MaxWidth):
		return over("width", w, int64(l.MaxWidth))
	case l.MaxHeight > 0 && h > int64(l.MaxHeight):
		return over("height", h, int64(l.MaxHeight))
	case l.MaxPixels > 0 && w*h > l.MaxPixels:
		return kindErrorf(ErrLimit, "%s: its frame of %dx%d (%d pixels) is over the limit of %d pixels: vsr refuses inputs this large", name, w, h, w*h, l.MaxPixels)
	}
	return nil
}

// countCap is the most frames the counting pass decodes: one past the
// limit, so that Probe can tell an input over it (0: no cap).
func (l Limits) countCap() int {
	if l.MaxFrames <= 0 {
		return 0
	}
	return l.MaxFrames + 1
}

// input returns the ffmpeg (or ffprobe) options that open path as an input
// under t's policy: "-i path", after the allow-lists of protocols (the
// file alone) and demuxers unless t.in.AllowPlaylists.
func (t tools) input(path string) []string {
	return inputArgs(path, t.in.AllowPlaylists)
}

func inputArgs(path string, allowPlaylists bool) []string {
	if allowPlaylists {
		return []string{"-i", fileArg(path)}
	}
	args := []string{"-protocol_whitelist", "file", "-format_whitelist", strings.Join(allowedFormats, ",")}
	if f := imageDemuxer(path); f != "" {
		args = append(args, "-f", f)
	}
	return append(args, "-i", fileArg(path))
}

// imageDemuxer returns the demuxer of a file that begins as a PNG, JPEG,
// WebP, BMP or TIFF image does, "" for any other. Without it ffmpeg reads
// some JPEGs named .jpg with image2 (its look at their first 2 KiB is less
// sure than the extension), the demuxer of file name patterns.
func imageDemuxer(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var h [12]byte
	n, _ := io.ReadFull(f, h[:])
	b := string(h[:n])
	switch {
	case strings.HasPrefix(b, "\x89PNG\r\n\x1a\n"):
		return "png_pipe"
	case strings.HasPrefix(b, "\xff\xd8\xff"):
		return "jpeg_pipe"
	case n == 12 && b[:4] == "RIFF" && b[8:] == "WEBP":
		return "webp_pipe"
	case strings.HasPrefix(b, "BM"):
		return "bmp_pipe"
	case strings.HasPrefix(b, "II*\x00") || strings.HasPrefix(b, "MM\x00*"):
		return "tiff_pipe"
	}
	return ""
}

// reRefused finds ffmpeg's refusal of a demuxer not on the allow-list,
// "[hls @ 0x55d0] Format not on whitelist 'mov,...'", and the demuxer.
var reRefused = regexp.MustCompile(`^\[([^\]@]+?) @ 0x[0-9a-fA-F]+\]\s*Format not on whitelist`)

// refusedFormat returns the error for an input whose demuxer the
// allow-list refused, or nil when r is no such refusal.
func refusedFormat(path string, r result) error {
	for _, line := range r.tail.Lines() {
		m := reRefused.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		why := "a format vsr does not read"
		for _, l := range listFormats {
			if name == l {
				why = "a playlist or list of files, which can make ffmpeg open other files and URLs"
			}
		}
		return kindErrorf(ErrFormat, "%q is read by ffmpeg's %s demuxer: %s; vsr reads video files (MP4, MOV, MKV, WebM, AVI, TS, ...) and PNG, JPEG, WebP, BMP and TIFF images", path, name, why)
	}
	return nil
}

package video

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Info describes the video stream of a file, as found by Probe.
type Info struct {
	// Path is the file as given to Probe.
	Path string `json:"path"`
	// Format is the container format as ffmpeg names it, e.g.
	// "mov,mp4,m4a,3gp,3g2,mj2" or "matroska,webm".
	Format string `json:"format"`
	// Codec is the video codec name, e.g. "h264" or "vp8".
	Codec string `json:"codec"`
	// Width and Height are the size of the decoded frames in pixels. For a
	// stream with a 90 or 270 degree display rotation they are the rotated
	// size, as ffmpeg applies the rotation when decoding.
	Width  int `json:"width"`
	Height int `json:"height"`
	// FPS is the exact frame rate ffmpeg assigns to the decoded stream, the
	// one it would encode it with (for a variable-frame-rate source, the
	// rate ffmpeg guesses; the Decoder yields one frame per source frame
	// regardless of timing).
	FPS Rational `json:"fps"`
	// Frames is the exact number of frames the Decoder will produce: Probe
	// counts them by decoding the whole stream.
	Frames int `json:"frames"`
	// DeclaredFrames is the frame count stated by the container (MP4/MOV
	// state one, Matroska/WebM usually do not); 0 when not stated or when
	// Probe worked without ffprobe.
	DeclaredFrames int `json:"declared_frames"`
	// HasAudio reports whether the file has an audio stream; AudioCodec is
	// the codec of the first one.
	HasAudio   bool   `json:"has_audio"`
	AudioCodec string `json:"audio_codec,omitempty"`
	// Duration is the container's duration in seconds (0 if unknown). It
	// can be longer than Frames/FPS when the audio is longer than the video.
	Duration float64 `json:"duration"`
	// Streams lists every stream of the file in order: the video, audio,
	// subtitle, data and attachment streams.
	Streams []Stream `json:"streams"`
	// PixFmt is the pixel format of the stream, e.g. "yuv420p".
	PixFmt string `json:"pix_fmt"`
	// Depth, Chroma and Alpha describe PixFmt (see PixFmtInfo): bits per
	// sample, chroma subsampling ("" for RGB), an alpha channel.
	Depth  int    `json:"depth"`
	Chroma string `json:"chroma,omitempty"`
	Alpha  bool   `json:"alpha,omitempty"`
	// Colour is the video stream's colour description.
	Colour Colour `json:"colour"`
	// HDR is its HDR metadata; nil when it has none. It comes from the
	// stream's side data, else (for a stream of more than 8 bits, or with
	// a PQ or HLG transfer) from its first frame's. Without ffprobe the
	// mastering display's values are exact to the 4 decimals ffmpeg
	// prints, and a frame's come from the showinfo filter, which older
	// ffmpeg (4.1) does not make describe them.
	HDR *HDR `json:"hdr,omitempty"`
	// SAR is the sample (pixel) aspect ratio of the decoded frames, in
	// lowest terms; the zero value when the file does not state one or
	// states 0:1 (unknown: square pixels), 1:1 when it states 1:1. For a
	// stream rotated by 90 or 270 degrees it is inverted, as Width and
	// Height are swapped.
	SAR Rational `json:"sar"`
	// FieldOrder is "progressive", "tt", "bb", "tb" or "bt" as the file
	// states it, "" when it does not.
	FieldOrder string `json:"field_order,omitempty"`
	// DetectedFieldOrder is, when FieldOrder is "", what ffmpeg's idet
	// filter makes of the first frames: "tt" or "bb" (interlaced, top or
	// bottom field first) or "progressive"; "" when not run (a single
	// frame) or when it said nothing. See Interlaced.
	DetectedFieldOrder string `json:"detected_field_order,omitempty"`
	// Deinterlace is the filter a Decoder applies ("bwdif", "yadif",
	// "double"), set on the Info Deinterlaced returns; "" for none.
	Deinterlace Deinterlace `json:"deinterlace,omitempty"`
	parity      string      // the deinterlacer's parity: auto, tff or bff
	// Title is the container's title, Tags all of its global metadata.
	Title string            `json:"title,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	// Chapters are the file's chapters in order.
	Chapters []Chapter `json:"chapters,omitempty"`
	// VideoStream is the index of the video stream among all streams of the
	// file (attached pictures such as cover art are skipped).
	VideoStream int `json:"video_stream"`
	// Rotation is the display rotation in degrees that ffmpeg applies when
	// decoding (0, 90, 180 or 270).
	Rotation int `json:"rotation"`
	// Orientation is a still image's EXIF orientation (1-8, 0 for none)
	// that the Decoder applies (see OrientFilter); Width and Height are
	// then the upright size. Probe leaves it 0: the caller sets it, from
	// ReadImageMeta.
	Orientation int `json:"orientation,omitempty"`
	// StartTime is the time of the first video frame in seconds, on the
	// clock ffmpeg's -ss uses (the file's start is 0).
	StartTime float64 `json:"start_time"`
	// Truncated is set on the Info Probe returns with an ErrTruncated
	// error: Frames is then the count of the decodable part, which a
	// Decoder delivers (up to that many frames) despite the damage after it.
	Truncated bool `json:"truncated,omitempty"`
	// VFR reports a variable frame rate: the frames' timestamps stray from
	// FPS's even spacing by more than half a frame somewhere.
	VFR bool `json:"vfr"`
	// Times are each frame's presentation time in seconds from the first
	// frame, then the end of the last frame (Frames+1 values); nil when
	// the stream's packets and decoded frames do not match one to one.
	Times []float64 `json:"-"`
	// Keys marks the key frames in display order (from the packets' flags;
	// nil when Times is).
	Keys []bool `json:"-"`
	// AllowPlaylists is the ProbeOptions.AllowPlaylists the file was
	// probed with: a Decoder opens it the same way.
	AllowPlaylists bool `json:"-"`
}

// Span returns the duration of the first n frames: from Times when known,
// else n/FPS.
func (i *Info) Span(n int) float64 {
	if len(i.Times) == i.Frames+1 && n >= 0 && n <= i.Frames {
		return i.Times[n]
	}
	return float64(n) * float64(i.FPS.Den) / float64(i.FPS.Num)
}

// Stream is one stream of a file.
type Stream struct {
	Index int    `json:"index"`
	Kind  string `json:"kind"` // "video", "audio", "subtitle", "data", "attachment"
	Codec string `json:"codec"`
	// Cover is set for a video stream that is an attached picture (cover
	// art), not the video.
	Cover bool `json:"cover,omitempty"`
	// Language (ISO 639-2, e.g. "eng") and Title are the stream's tags.
	Language string `json:"language,omitempty"`
	Title    string `json:"title,omitempty"`
	// Dispositions are its flags as ffprobe names them: "default",
	// "forced", "hearing_impaired", "comment", ...
	Dispositions []string `json:"dispositions,omitempty"`
}

// streamMeta and fileMeta are what the metadata pass learns, before frames
// are counted.
type streamMeta struct {
	index        int
	kind         string // "video", "audio", ...
	codec        string
	width        int
	height       int
	pixFmt       string
	fps          Rational
	nbFrames     int
	attachedPic  bool
	rotation     int
	colour       Colour
	hdr          HDR
	sar          Rational // zero when not stated
	fieldOrder   string
	language     string
	title        string
	timecode     string // its tag, uncleaned
	dispositions []string
}

type fileMeta struct {
	format   string
	duration float64
	start    float64 // the file's start time: its earliest stream's first timestamp
	streams  []streamMeta
	tool     string // which program produced it, for messages
	tags     map[string]string
	chapters []Chapter
}

func (m *fileMeta) video() *streamMeta {
	for i := range m.streams {
		if s := &m.streams[i]; s.kind == "video" && !s.attachedPic {
			return s
		}
	}
	return nil
}

func (m *fileMeta) audio() []streamMeta {
	var out []streamMeta
	for _, s := range m.streams {
		if s.kind == "audio" {
			out = append(out, s)
		}
	}
	return out
}

// Probe inspects the video file at path and returns its Info. It uses
// ffprobe when available (see FFprobe) and ffmpeg otherwise, and it always
// decodes the video stream once with ffmpeg to count its frames exactly and
// to check it. These are errors: a file whose container states more frames
// than can be decoded because data is missing (ErrTruncated); a file ffmpeg
// reports decoding errors for (ErrCorrupt); a file without frames
// (ErrNoFrames); a file without a video stream or that is not a media file
// (ErrNotVideo); a missing file (fs.ErrNotExist). An MP4 whose edit list
// hides some of its frames (as when cut without re-encoding) is not an
// error: Frames counts the frames shown, DeclaredFrames the frames stored.
// With ErrTruncated, Probe also returns the Info of the decodable part
// (Truncated set), so that a caller can salvage those frames.
// Decoding takes a small fraction of the time that upscaling the same video
// does, but it is not instant for long videos.
//
// Probe opens path as ProbeWith does with the zero ProbeOptions: the file
// alone, read by a demuxer of a video container or image (a playlist or
// list of files is refused with ErrFormat), within DefaultLimits (ErrLimit).
func Probe(ctx context.Context, path string) (*Info, error) {
	return ProbeWith(ctx, path, ProbeOptions{})
}

// ProbeWith is Probe with options: whether playlists may be read, and the
// limits the input must keep to.
func ProbeWith(ctx context.Context, path string, opt ProbeOptions) (*Info, error) {
	t, err := resolveTools()
	if err != nil {
		return nil, err
	}
	t.in = opt
	return probe(ctx, path, t)
}

// ProbeHeader checks path as Probe does from its container's header alone,
// without decoding it (a fraction of a second): the format allowed (else
// ErrFormat), a video stream there with a size (else ErrNotVideo), and the
// limits on its size, streams, duration and declared frames (ErrLimit).
// The Info it returns has no frame count, times or exact frame rate
// (Frames is 0, FPS the container's). A service calls it when a task is
// submitted, Probe when the task runs.
func ProbeHeader(ctx context.Context, path string, opt ProbeOptions) (*Info, error) {
	t, err := resolveTools()
	if err != nil {
		return nil, err
	}
	t.in = opt
	info, _, err := probeHeader(ctx, path, t)
	return info, err
}

// probeHeader is ProbeHeader with the tools given; it also returns what
// the header says.
func probeHeader(ctx context.Context, path string, t tools) (*Info, *fileMeta, error) {
	if err := checkInput(path); err != nil {
		return nil, nil, err
	}
	m, err := probeMeta(ctx, path, t)
	if err != nil {
		return nil, nil, err
	}
	vs := m.video()
	if vs == nil {
		return nil, nil, kindErrorf(ErrNotVideo, "%q has no video stream: give a video file", path)
	}
	info := &Info{
		Path:           path,
		Format:         m.format,
		Codec:          vs.codec,
		Width:          vs.width,
		Height:         vs.height,
		FPS:            vs.fps,
		DeclaredFrames: vs.nbFrames,
		Duration:       m.duration,
		PixFmt:         vs.pixFmt,
		VideoStream:    vs.index,
		Rotation:       vs.rotation,
		AllowPlaylists: t.in.AllowPlaylists,
	}
	info.Depth, info.Chroma, _, info.Alpha = PixFmtInfo(vs.pixFmt)
	info.Colour, info.HDR, info.FieldOrder = vs.colour, vs.hdr.orNil(), vs.fieldOrder
	info.SAR = vs.sar
	info.Title, info.Tags, info.Chapters = tag(m.tags, "title"), cleanTags(m.tags), m.chapters
	for _, s := range m.streams {
		info.Streams = append(info.Streams, Stream{Index: s.index, Kind: s.kind, Codec: s.codec, Cover: s.attachedPic,
			Language: s.language, Title: s.title, Dispositions: s.dispositions})
	}
	if vs.rotation == 90 || vs.rotation == 270 {
		info.Width, info.Height = info.Height, info.Width
		info.SAR.Num, info.SAR.Den = info.SAR.Den, info.SAR.Num
	}
	if a := m.audio(); len(a) > 0 {
		info.HasAudio = true
		info.AudioCodec = a[0].codec
	}
	if info.Width <= 0 || info.Height <= 0 {
		return nil, nil, kindErrorf(ErrNotVideo, "%q: %s could not determine the size of its video stream (codec %q): re-encode it with ffmpeg first", path, m.tool, vs.codec)
	}
	if err := t.in.Limits.withDefaults().check(info, len(m.streams)); err != nil {
		return nil, nil, err
	}
	return info, m, nil
}

func probe(ctx context.Context, path string, t tools) (*Info, error) {
	info, m, err := probeHeader(ctx, path, t)
	if err != nil {
		return nil, err
	}
	first := decodedFrameRate(ctx, path, t, info.VideoStream)
	if first.ok {
		info.FPS, info.StartTime = first.fps, first.start
	}
	if wantsFrameHDR(info) {
		frameHDR(ctx, path, t, info, first.log)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("probe %q: %w", path, ctx.Err())
	}
	if !info.FPS.Valid() {
		return nil, kindErrorf(ErrNotVideo, "%q: %s could not determine the frame rate of its video stream: re-encode it with ffmpeg and -r first", path, m.tool)
	}
	n, err := countFrames(ctx, path, t, info)
	if errors.Is(err, ErrTruncated) && n > 0 {
		info.Frames, info.Truncated = n, true
		return info, err
	}
	if err != nil {
		return nil, err
	}
	info.Frames = n
	if n > 1 && info.FieldOrder == "" {
		info.DetectedFieldOrder = detectFieldOrder(ctx, path, t, info)
	}
	if n > 1 {
		info.Times, info.Keys = frameTimes(ctx, path, t, info)
		info.VFR = variable(info.Times, info.FPS)
	}
	return info, nil
}

// checkInput turns the common reasons a path cannot be read into one-line
// errors before any child is started.
func checkInput(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &kindError{msg: fmt.Sprintf("open input %q: no such file", path), kind: fs.ErrNotExist}
	case errors.Is(err, fs.ErrPermission):
		return &kindError{msg: fmt.Sprintf("open input %q: permission denied", path), kind: fs.ErrPermission}
	case err != nil:
		return fmt.Errorf("open input %q: %v", path, err)
	case st.IsDir():
		return fmt.Errorf("open input %q: is a directory, not a video file", path)
	case !st.Mode().IsRegular():
		return fmt.Errorf("input %q is a pipe or a device, not a file: vsr reads its input more than once (to probe it, then to decode it, in parallel parts); save it to a file first", path)
	case st.Size() == 0:
		return kindErrorf(ErrNotVideo, "%q is an empty file, not a video", path)
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return &kindError{msg: fmt.Sprintf("open input %q: permission denied", path), kind: fs.ErrPermission}
		}
		return fmt.Errorf("open input %q: %v", path, err)
	}
	f.Close()
	return nil
}

// looksLikeMP4 reports whether the file begins with an ISO media box (a
// 32-bit size and a type such as ftyp, moov, mdat, free, wide, skip), as
// every MP4 or MOV file, whole or cut short, does.
func looksLikeMP4(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [8]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return false
	}
	switch string(h[4:8]) {
	case "ftyp", "moov", "mdat", "free", "wide", "skip", "pnot", "uuid":
		return true
	}
	return false
}

// notMedia builds the error for a file the tool could not open as media.
func notMedia(path, tool string, r result) error {
	msg := describe(r.tail, r.err)
	msg = strings.TrimPrefix(msg, fileArg(path)+": ")
	msg = strings.TrimPrefix(msg, path+": ")
	if errors.Is(r.err, ErrNoFFmpeg) {
		return r.err
	}
	if err := refusedFormat(path, r); err != nil {
		return err
	}
	if r.tail.Contains("moov atom not found") && !looksLikeMP4(path) {
		return kindErrorf(ErrNotVideo, "%q is not a video file: it does not begin as an MP4 file does (%s: moov atom not found)", path, tool)
	}
	if r.tail.Contains("moov atom not found") {
		return kindErrorf(ErrTruncated, "%q is incomplete: its MP4 index is missing (%s: moov atom not found), as when a recording or download is interrupted", path, tool)
	}
	return kindErrorf(ErrNotVideo, "%q is not a video file (%s: %s)", path, tool, msg)
}

// probeMeta reads the container and stream metadata, with ffprobe when
// available, else from ffmpeg's description of its input.
func probeMeta(ctx context.Context, path string, t tools) (*fileMeta, error) {
	var m *fileMeta
	var err error
	if t.ffprobe != "" {
		m, err = probeMetaFFprobe(ctx, path, t)
	} else {
		m, err = probeMetaFFmpeg(ctx, path, t)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("probe %q: %w", path, ctx.Err())
	}
	return m, err
}

// wantsFrameHDR reports whether the HDR metadata of info's first frame is
// worth reading: its stream states none, and it is more than 8 bits or
// its transfer is PQ or HLG (static metadata travels in the frames of
// HEVC and AV1, which containers do not always repeat).
func wantsFrameHDR(info *Info) bool {
	return (info.HDR == nil || info.HDR.Mastering == nil && info.HDR.Light == nil) &&
		(info.Depth > 8 || info.Colour.Transfer == "smpte2084" || info.Colour.Transfer == "arib-std-b67")
}

// frameHDR adds the HDR metadata of the first frame of info's video stream
// to info.HDR: as ffprobe reports it, or without ffprobe as the showinfo
// filter described it in showinfo (decodedFrameRate's log).
func frameHDR(ctx context.Context, path string, t tools, info *Info, showinfo []byte) {
	h := info.HDR
	if h == nil {
		h = &HDR{}
	}
	if t.ffprobe == "" {
		for _, line := range strings.Split(string(showinfo), "\n") {
			if _, sd, ok := strings.Cut(line, "side data - "); ok {
				parseHDRText(h, sd)
			}
		}
		info.HDR = h.orNil()
		return
	}
	r := runToolMax(ctx, probeOutputMax, t.ffprobe, append([]string{"-v", "error", "-select_streams", strconv.Itoa(info.VideoStream),
		"-show_frames", "-read_intervals", "%+#1", "-show_entries", "frame=side_data_list", "-of", "json"}, t.input(path)...)...)
	var out struct {
		Frames []struct {
			SideDataList []ffprobeSideData `json:"side_data_list"`
		} `json:"frames"`
	}
	if r.err == nil && json.Unmarshal(r.stdout, &out) == nil && len(out.Frames) > 0 {
		h.addSideData(out.Frames[0].SideDataList)
	}
	info.HDR = h.orNil()
}

// normRotation maps any rotation in degrees (either sign convention) to
// 0, 90, 180 or 270; only whether width and height swap matters here.
func normRotation(deg float64) int {
	d := int(math.Round(deg/90)) * 90 % 360
	if d < 0 {
		d += 360
	}
	return d
}

// What the showinfo filter prints about a frame.
var (
	rePTSTime  = regexp.MustCompile(`pts_time:\s*(-?[0-9.]+)`)
	reShowinfo = regexp.MustCompile(`config in time_base: -?\d+/-?\d+, frame_rate: (\d+)/(\d+)`)
)

// firstFrame is what decodedFrameRate learns from the first frame.
type firstFrame struct {
	ok    bool
	fps   Rational
	start float64
	log   []byte // showinfo's description of it, side data included
}

// decodedFrameRate returns the exact frame rate ffmpeg gives the decoded
// video stream (what it would encode it with), as printed by the showinfo
// filter for the first frame; ok is false if it printed none. This is
// av_guess_frame_rate's choice, which is not always the container's
// r_frame_rate (interlaced H.264, for one), and it is exact where ffmpeg's
// description of the input rounds ("29.97 fps").
//
// It also returns the first frame's time (showinfo's pts_time) and
// showinfo's output, which describes the frame's side data.
func decodedFrameRate(ctx context.Context, path string, t tools, stream int) firstFrame {
	args := append([]string{"-nostdin", "-hide_banner", "-nostats"}, t.input(path)...)
	r := runTool(ctx, t.ffmpeg, append(args,
		"-map", "0:"+strconv.Itoa(stream), "-frames:v", "1", "-vf", "showinfo", "-f", "null", "-")...)
	if mm := reShowinfo.FindSubmatch(r.stderr); mm != nil {
		n, _ := strconv.Atoi(string(mm[1]))
		d, _ := strconv.Atoi(string(mm[2]))
		if fr := (Rational{n, d}).Reduced(); fr.Valid() {
			var start float64
			if pm := rePTSTime.FindSubmatch(r.stderr); pm != nil {
				start, _ = strconv.ParseFloat(string(pm[1]), 64)
			}
			return firstFrame{ok: true, fps: fr, start: start, log: r.stderr}
		}
	}
	return firstFrame{log: r.stderr}
}

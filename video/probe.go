package video

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"regexp"
	"slices"
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

// streamMeta and fileMeta are what the metadata pass learns, before frames
// are counted.
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

// frameTimes reads the video packets' timestamps and key flags (ffmpeg's
// framecrc muxer, no decoding) and returns the frames' times from the
// first, then the end of the last, and which frames are key frames, in
// display order; nil when the packets are not the Frames frames one to
// one or a timestamp is missing.
func frameTimes(ctx context.Context, path string, t tools, info *Info) ([]float64, []bool) {
	args := append(append(append([]string{}, baseArgs...), t.input(path)...),
		"-map", "0:"+strconv.Itoa(info.VideoStream), "-c", "copy", "-f", "framecrc", "-")
	r := runTool(ctx, t.ffmpeg, args...)
	if r.err != nil {
		return nil, nil
	}
	var tb Rational
	var pts []int64
	key := map[int64]bool{}
	last, top := int64(0), int64(math.MinInt64) // the duration of the packet shown last, its time
	for _, line := range strings.Split(string(r.stdout), "\n") {
		if v, ok := strings.CutPrefix(line, "#tb 0: "); ok {
			if _, err := fmt.Sscanf(v, "%d/%d", &tb.Num, &tb.Den); err != nil {
				return nil, nil
			}
			continue
		}
		f := strings.Split(line, ",") // stream, dts, pts, duration, size, crc[, flags...]
		if len(f) < 6 || strings.HasPrefix(line, "#") {
			continue
		}
		p, err1 := strconv.ParseInt(strings.TrimSpace(f[2]), 10, 64)
		d, err2 := strconv.ParseInt(strings.TrimSpace(f[3]), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, nil
		}
		if p > top {
			last, top = d, p
		}
		// framecrc writes the flags only when they are not just "key".
		flags := int64(1)
		if len(f) > 6 {
			fmt.Sscanf(strings.TrimSpace(f[6]), "F=0x%x", &flags)
		}
		key[p] = flags&1 != 0
		pts = append(pts, p)
	}
	if len(pts) != info.Frames || !tb.Valid() {
		return nil, nil
	}
	slices.Sort(pts)
	sec := func(v int64) float64 { return float64(v-pts[0]) * float64(tb.Num) / float64(tb.Den) }
	times := make([]float64, len(pts)+1)
	for i, p := range pts {
		if i > 0 && p == pts[i-1] {
			return nil, nil // two frames at one time: not timestamps to keep
		}
		times[i] = sec(p)
	}
	end := pts[len(pts)-1] + last
	if last <= 0 { // no duration stated: the mean spacing
		end = pts[len(pts)-1] + (pts[len(pts)-1]-pts[0])/int64(len(pts)-1)
	}
	times[len(pts)] = sec(end)
	keys := make([]bool, len(pts))
	for i, p := range pts {
		keys[i] = key[p]
	}
	return times, keys
}

// variable reports whether times stray from an even spacing at fps by more
// than half a frame.
func variable(times []float64, fps Rational) bool {
	if len(times) < 2 || !fps.Valid() {
		return false
	}
	step := float64(fps.Den) / float64(fps.Num)
	for i, t := range times[:len(times)-1] {
		if math.Abs(t-float64(i)*step) > step/2 {
			return true
		}
	}
	return false
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

type ffprobeOutput struct {
	Streams []struct {
		Index          int               `json:"index"`
		CodecType      string            `json:"codec_type"`
		CodecName      string            `json:"codec_name"`
		Width          int               `json:"width"`
		Height         int               `json:"height"`
		PixFmt         string            `json:"pix_fmt"`
		RFrameRate     string            `json:"r_frame_rate"`
		AvgFrameRate   string            `json:"avg_frame_rate"`
		NbFrames       string            `json:"nb_frames"`
		SAR            string            `json:"sample_aspect_ratio"`
		FieldOrder     string            `json:"field_order"`
		ColorRange     string            `json:"color_range"`
		ColorSpace     string            `json:"color_space"`
		ColorTransfer  string            `json:"color_transfer"`
		ColorPrimaries string            `json:"color_primaries"`
		ChromaLocation string            `json:"chroma_location"`
		Disposition    map[string]int    `json:"disposition"`
		Tags           map[string]string `json:"tags"`
		SideDataList   []ffprobeSideData `json:"side_data_list"`
	} `json:"streams"`
	Chapters []struct {
		StartTime string            `json:"start_time"`
		EndTime   string            `json:"end_time"`
		Tags      map[string]string `json:"tags"`
	} `json:"chapters"`
	Format struct {
		FormatName string            `json:"format_name"`
		Duration   string            `json:"duration"`
		Tags       map[string]string `json:"tags"`
	} `json:"format"`
}

func probeMetaFFprobe(ctx context.Context, path string, t tools) (*fileMeta, error) {
	ffprobe := t.ffprobe
	r := runToolMax(ctx, probeOutputMax, ffprobe, append([]string{"-v", "error", "-show_format", "-show_streams",
		"-show_entries", "chapter=start_time,end_time:chapter_tags=title", "-of", "json"}, t.input(path)...)...)
	if r.over {
		return nil, fmt.Errorf("probe %q: ffprobe describes it in more than %d MiB (its streams, chapters and tags): not a file vsr reads", path, probeOutputMax>>20)
	}
	if r.err != nil {
		return nil, notMedia(path, "ffprobe", r)
	}
	var out ffprobeOutput
	if err := json.Unmarshal(r.stdout, &out); err != nil {
		return nil, fmt.Errorf("probe %q: cannot parse ffprobe output (%v): check that %s is a working ffprobe or set VSR_FFPROBE=none", path, err, ffprobe)
	}
	m := &fileMeta{format: out.Format.FormatName, tool: "ffprobe", tags: out.Format.Tags}
	if d, err := strconv.ParseFloat(out.Format.Duration, 64); err == nil && d > 0 && !math.IsInf(d, 0) {
		m.duration = d
	}
	for _, c := range out.Chapters {
		start, err1 := strconv.ParseFloat(c.StartTime, 64)
		end, err2 := strconv.ParseFloat(c.EndTime, 64)
		if err1 == nil && err2 == nil && len(m.chapters) < maxChapters {
			m.chapters = append(m.chapters, Chapter{Start: start, End: end, Title: tag(c.Tags, "title")})
		}
	}
	for _, s := range out.Streams {
		sm := streamMeta{
			index:       s.Index,
			kind:        s.CodecType,
			codec:       s.CodecName,
			width:       s.Width,
			height:      s.Height,
			pixFmt:      s.PixFmt,
			attachedPic: s.Disposition["attached_pic"] != 0,
			colour: Colour{Primaries: ffmpegName(s.ColorPrimaries), Transfer: ffmpegName(s.ColorTransfer),
				Matrix: ffmpegName(s.ColorSpace), Range: ffmpegName(s.ColorRange), ChromaLocation: ffmpegName(s.ChromaLocation)},
			fieldOrder:   fieldOrders[s.FieldOrder],
			language:     ffmpegName(tag(s.Tags, "language")),
			title:        tag(s.Tags, "title"),
			timecode:     tag(s.Tags, "timecode"),
			dispositions: dispositionsOf(s.Disposition),
		}
		if sm.kind == "attachment" && sm.codec == "" {
			sm.codec = tag(s.Tags, "mimetype")
		}
		if sar, ok := parseFraction(strings.Replace(s.SAR, ":", "/", 1)); ok && sar.Num > 0 {
			sm.sar = sar.Reduced()
		}
		if n, err := strconv.Atoi(s.NbFrames); err == nil && n > 0 {
			sm.nbFrames = n
		}
		rfr, _ := ParseRational(s.RFrameRate)
		afr, _ := ParseRational(s.AvgFrameRate)
		sm.fps = guessFrameRate(rfr, afr)
		rot := 0.0
		if v, ok := s.Tags["rotate"]; ok {
			rot, _ = strconv.ParseFloat(v, 64)
		}
		for _, sd := range s.SideDataList {
			if r, err := strconv.ParseFloat(string(sd.Rotation), 64); err == nil && sd.Type == "Display Matrix" && r != 0 {
				rot = r
			}
		}
		sm.rotation = normRotation(rot)
		sm.hdr.addSideData(s.SideDataList)
		m.streams = append(m.streams, sm)
	}
	return m, nil
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

// guessFrameRate picks the rate as ffmpeg's av_guess_frame_rate does for
// the demuxer's r_frame_rate and avg_frame_rate.
func guessFrameRate(r, avg Rational) Rational {
	if !r.Valid() {
		return avg.Reduced()
	}
	if avg.Valid() && avg.Float() < 70 && r.Float() > 210 {
		return avg.Reduced()
	}
	return r.Reduced()
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

var (
	reInput     = regexp.MustCompile(`^Input #0, (.*), from '`)
	reDuration  = regexp.MustCompile(`^Duration: (\d+):(\d+):(\d+(?:\.\d+)?)`)
	reStream    = regexp.MustCompile(`^Stream #0:(\d+)(?:\[[^\]]*\])?(?:\(([^)]*)\))?: (\w+): (.*)$`)
	reChapter   = regexp.MustCompile(`^Chapter #0:\d+: start (-?\d+(?:\.\d+)?), end (-?\d+(?:\.\d+)?)`)
	reSAR       = regexp.MustCompile(`SAR (\d+):(\d+) DAR`)
	reDispos    = regexp.MustCompile(` \(([a-z -]+)\)$`)
	reSize      = regexp.MustCompile(`^(\d+)x(\d+)\b`)
	reRate      = regexp.MustCompile(`^(\d+(?:\.\d+)?)(k?) (fps|tbr)$`)
	reRotate    = regexp.MustCompile(`^rotate\s*:\s*(-?\d+(?:\.\d+)?)`)
	reDispMat   = regexp.MustCompile(`displaymatrix: rotation of (-?\d+(?:\.\d+)?) degrees`)
	rePTSTime   = regexp.MustCompile(`pts_time:\s*(-?[0-9.]+)`)
	reShowinfo  = regexp.MustCompile(`config in time_base: -?\d+/-?\d+, frame_rate: (\d+)/(\d+)`)
	reCodecName = regexp.MustCompile(`^([\w-]+)`)
)

// probeMetaFFmpeg parses what "ffmpeg -i FILE" prints about its input. The
// frame rates in it are rounded; Probe gets the exact one from
// decodedFrameRate.
func probeMetaFFmpeg(ctx context.Context, path string, t tools) (*fileMeta, error) {
	r := runTool(ctx, t.ffmpeg, append([]string{"-nostdin", "-hide_banner"}, t.input(path)...)...)
	m, ok := parseFFmpegInfo(r.stderr)
	if !ok {
		return nil, notMedia(path, "ffmpeg", r)
	}
	m.tool = "ffmpeg"
	return m, nil
}

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

// parseFFmpegInfo parses ffmpeg's description of input #0. It reports false
// when there is none (ffmpeg could not open the file). Its blocks
// ("Metadata:", "Side data:") are told apart by their indentation, as
// ffmpeg indents their entries.
func parseFFmpegInfo(out []byte) (*fileMeta, bool) {
	m := &fileMeta{}
	found := false
	var cur *streamMeta
	var chapter *Chapter
	owner := "" // what a "Metadata:" block belongs to: "file", "chapter" or "stream"
	block, blockIndent, lastKey := "", 0, ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		indent := len(raw) - len(strings.TrimLeft(raw, " "))
		if block != "" && indent > blockIndent && found {
			if block == "side" && cur != nil {
				parseHDRText(&cur.hdr, line)
			} else if block == "meta" {
				key, value, _ := strings.Cut(line, ": ")
				key = strings.TrimSpace(strings.TrimSuffix(key, ":"))
				if key == "" { // a value's next line
					key, value = lastKey, "\n"+value
				}
				lastKey = key
				switch {
				case owner == "file" && len(m.tags) < 16*maxTags:
					if m.tags == nil {
						m.tags = map[string]string{}
					}
					m.tags[key] += value
				case owner == "chapter" && chapter != nil && strings.EqualFold(key, "title"):
					chapter.Title = cleanText(chapter.Title+value, maxText)
				case owner == "stream" && cur != nil && strings.EqualFold(key, "title"):
					cur.title = cleanText(cur.title+value, maxText)
				case owner == "stream" && cur != nil && strings.EqualFold(key, "timecode"):
					cur.timecode = cleanText(value, 32)
				}
			}
		} else {
			block = ""
		}
		if mm := reInput.FindStringSubmatch(line); mm != nil {
			if found {
				break // a second input: not ours
			}
			found, owner = true, "file"
			m.format = mm[1]
			continue
		}
		if !found {
			continue
		}
		if strings.HasPrefix(line, "Output #") || strings.HasPrefix(line, "Input #") {
			break
		}
		switch line {
		case "Metadata:":
			block, blockIndent, lastKey = "meta", indent, ""
			continue
		case "Side data:":
			block, blockIndent = "side", indent
			continue
		}
		if mm := reDuration.FindStringSubmatch(line); mm != nil {
			h, _ := strconv.Atoi(mm[1])
			mi, _ := strconv.Atoi(mm[2])
			s, _ := strconv.ParseFloat(mm[3], 64)
			m.duration = float64(h*3600+mi*60) + s
			continue
		}
		if mm := reChapter.FindStringSubmatch(line); mm != nil && cur == nil {
			owner, chapter = "chapter", nil
			start, _ := strconv.ParseFloat(mm[1], 64)
			end, _ := strconv.ParseFloat(mm[2], 64)
			if len(m.chapters) < maxChapters {
				m.chapters = append(m.chapters, Chapter{Start: start, End: end})
				chapter = &m.chapters[len(m.chapters)-1]
			}
			continue
		}
		if mm := reStream.FindStringSubmatch(line); mm != nil {
			idx, _ := strconv.Atoi(mm[1])
			s := parseStreamLine(idx, strings.ToLower(mm[3]), mm[4])
			s.language = cleanText(mm[2], 16)
			m.streams = append(m.streams, s)
			cur, owner = &m.streams[len(m.streams)-1], "stream"
			continue
		}
		if cur != nil {
			if mm := reRotate.FindStringSubmatch(line); mm != nil {
				f, _ := strconv.ParseFloat(mm[1], 64)
				cur.rotation = normRotation(f)
			} else if mm := reDispMat.FindStringSubmatch(line); mm != nil {
				f, _ := strconv.ParseFloat(mm[1], 64)
				cur.rotation = normRotation(f)
			}
		}
	}
	return m, found
}

// parseStreamLine parses the part after "Video: " or "Audio: ", e.g.
// "h264 (High) (avc1 / 0x31637661), yuv420p(tv, bt709, progressive), 64x48
// [SAR 1:1 DAR 4:3], 57 kb/s, 29.97 fps, 29.97 tbr, 30k tbn (default)".
func parseStreamLine(idx int, kind, desc string) streamMeta {
	s := streamMeta{index: idx, kind: kind}
	if strings.Contains(desc, "(attached pic)") {
		s.attachedPic = true
	}
	for { // the dispositions at the end, "(default) (forced)"; those vsr does not know are skipped
		mm := reDispos.FindStringSubmatchIndex(desc)
		if mm == nil {
			break
		}
		if d := dispositionNames[desc[mm[2]:mm[3]]]; d != "" {
			s.dispositions = append(s.dispositions, d)
		}
		desc = desc[:mm[0]]
	}
	slices.Sort(s.dispositions)
	fields := splitTopLevel(desc)
	if len(fields) == 0 {
		return s
	}
	s.codec = reCodecName.FindString(fields[0])
	if kind != "video" {
		return s
	}
	if all := reSAR.FindAllStringSubmatch(desc, -1); all != nil { // the stream's, after the codec's
		n, _ := strconv.Atoi(all[len(all)-1][1])
		d, _ := strconv.Atoi(all[len(all)-1][2])
		if sar := (Rational{n, d}); sar.Valid() {
			s.sar = sar.Reduced()
		}
	}
	var fps, tbr float64
	for i, f := range fields[1:] {
		f = strings.TrimSpace(f)
		if mm := reSize.FindStringSubmatch(f); mm != nil && s.width == 0 {
			s.width, _ = strconv.Atoi(mm[1])
			s.height, _ = strconv.Atoi(mm[2])
			continue
		}
		if mm := reRate.FindStringSubmatch(f); mm != nil {
			v, _ := strconv.ParseFloat(mm[1], 64)
			if mm[2] == "k" {
				v *= 1000
			}
			if mm[3] == "fps" {
				fps = v
			} else {
				tbr = v
			}
			continue
		}
		if i == 0 {
			pf := f
			if j := strings.IndexByte(pf, '('); j >= 0 {
				s.colour, s.fieldOrder = parsePixFmtParens(strings.TrimSuffix(pf[j+1:], ")"))
				pf = pf[:j]
			}
			s.pixFmt = strings.TrimSpace(pf)
		}
	}
	switch {
	case tbr > 0 && (fps == 0 || fps < 70 && tbr > 210):
		if fps > 0 {
			s.fps = rationalFromDecimal(fps, 0.01)
		} else {
			s.fps = rationalFromDecimal(tbr, 0.01)
		}
	case tbr > 0:
		s.fps = rationalFromDecimal(tbr, 0.01)
	case fps > 0:
		s.fps = rationalFromDecimal(fps, 0.01)
	}
	return s
}

// splitTopLevel splits on commas outside parentheses and brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(', '[':
			depth++
		case ')', ']':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// countFrames decodes the video stream with ffmpeg, discarding the frames,
// and returns how many there are. It turns decoding errors, missing data
// and an empty stream into errors, and stops past the limit of frames
// (ErrLimit).
func countFrames(ctx context.Context, path string, t tools, info *Info) (int, error) {
	args := append(append([]string{}, baseArgs...), "-progress", "pipe:1")
	args = append(append(args, t.input(path)...), "-map", "0:"+strconv.Itoa(info.VideoStream), "-vf", renumberFilter(info.FPS))
	lim := t.in.Limits.withDefaults()
	if c := lim.countCap(); c > 0 {
		args = append(args, "-frames:v", strconv.Itoa(c))
	}
	args = append(append(args, passthroughArgs(ctx, t.ffmpeg)...), "-f", "null", "-")
	r := runTool(ctx, t.ffmpeg, args...)
	if ctx.Err() != nil {
		return 0, fmt.Errorf("probe %q: %w", path, ctx.Err())
	}
	if errors.Is(r.err, ErrNoFFmpeg) {
		return 0, r.err
	}
	n := lastProgressFrame(r.stdout)
	if c := lim.countCap(); c > 0 && n >= c {
		return 0, kindErrorf(ErrLimit, "%q: it has over %d frames, the limit: vsr refuses inputs this long", path, lim.MaxFrames)
	}
	failed := r.err != nil || r.tail.Count() > 0
	why := ""
	if failed {
		why = " (ffmpeg: " + describe(r.tail, r.err) + ")"
	}
	// How demuxers report data that ends early.
	cut := r.tail.Contains("partial file") || r.tail.Contains("ended prematurely")
	packets := func() int {
		p := countPackets(ctx, path, t, info.VideoStream)
		if ctx.Err() != nil {
			return -1
		}
		return p
	}
	if declared := info.DeclaredFrames; declared > 0 && n < declared {
		p := packets()
		if ctx.Err() != nil {
			return 0, fmt.Errorf("probe %q: %w", path, ctx.Err())
		}
		switch {
		case cut || (p >= 0 && p < declared):
			return n, kindErrorf(ErrTruncated, "%q is truncated: the container says %d frames but only %d could be decoded%s; --frames %d restores those", path, declared, n, why, n)
		case failed:
			return 0, kindErrorf(ErrCorrupt, "%q is corrupt: the container says %d frames but only %d could be decoded%s", path, declared, n, why)
		}
		// Every packet is there and decoding was clean: an edit list hides
		// some frames, as in MP4 files cut without re-encoding. ffmpeg
		// decodes (and the Decoder yields) only the n that are shown.
	}
	switch {
	case cut:
		if n == 0 {
			return 0, kindErrorf(ErrTruncated, "%q is truncated: its data ends before any frame could be decoded%s", path, why)
		}
		return n, kindErrorf(ErrTruncated, "%q is truncated: its data ends early and only %d frames could be decoded%s; --frames %d restores those", path, n, why, n)
	case n == 0 && !failed:
		return 0, kindErrorf(ErrNoFrames, "%q has no video frames", path)
	case n == 0:
		// Nothing decoded, with errors: an empty stream or an undecodable one?
		p := packets()
		if ctx.Err() != nil {
			return 0, fmt.Errorf("probe %q: %w", path, ctx.Err())
		}
		if p == 0 {
			return 0, kindErrorf(ErrNoFrames, "%q has no video frames", path)
		}
		return 0, kindErrorf(ErrCorrupt, "%q is corrupt: none of its video frames could be decoded%s", path, why)
	case failed:
		return 0, kindErrorf(ErrCorrupt, "%q is corrupt: ffmpeg reported errors decoding its %d video frames%s; repair or re-encode it first", path, n, why)
	}
	return n, nil
}

// countPackets counts the packets of one stream without decoding them, with
// ffprobe when available, else with ffmpeg's framecrc muxer (one line per
// packet). It returns -1 when it cannot tell.
func countPackets(ctx context.Context, path string, t tools, stream int) int {
	if t.ffprobe != "" {
		r := runTool(ctx, t.ffprobe, append([]string{"-v", "error", "-select_streams", strconv.Itoa(stream), "-count_packets",
			"-show_entries", "stream=nb_read_packets", "-of", "default=noprint_wrappers=1:nokey=1"}, t.input(path)...)...)
		out := strings.TrimSpace(string(r.stdout))
		if n, err := strconv.Atoi(out); err == nil {
			return n
		}
		if r.err == nil && out == "N/A" {
			return 0 // what ffprobe prints for a stream without packets
		}
		return -1
	}
	args := append(append(append([]string{}, baseArgs...), t.input(path)...),
		"-map", "0:"+strconv.Itoa(stream), "-c", "copy", "-f", "framecrc", "-")
	r := runTool(ctx, t.ffmpeg, args...)
	n := 0
	for _, line := range strings.Split(string(r.stdout), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}

// renumberFilter is the filter chain the frame-counting and decoding
// passes use. It gives the frames fresh, evenly spaced timestamps N/fps in
// a fine time base. The source timestamps are irrelevant for raw output, but
// in passthrough mode ffmpeg rounds them to the encoder's 1/fps time base,
// and in a millisecond time base (Matroska, WebM) two frames can round to
// the same value, which the muxer reports as an error ("non monotonically
// increasing dts").
func renumberFilter(fps Rational) string {
	if !fps.Valid() {
		fps = Rational{25, 1}
	}
	return fmt.Sprintf("settb=AVTB,setpts=N*1000000*%d/%d", fps.Den, fps.Num)
}

// lastProgressFrame returns the last "frame=N" of ffmpeg's -progress output.
func lastProgressFrame(out []byte) int {
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "frame="); ok {
			if k, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				n = k
			}
		}
	}
	return n
}

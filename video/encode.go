package video

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EncodeOptions controls an Encoder.
type EncodeOptions struct {
	// Width and Height are the size of the frames given to Write.
	Width, Height int
	// FPS is the exact frame rate of the output; every frame written lasts
	// 1/FPS and none is dropped or duplicated, unless Times is set.
	FPS Rational
	// Times, when set, are the frames' own times in seconds from the
	// first (one per frame written, then the end of the last): the output
	// keeps them (a variable frame rate) instead of spacing frames 1/FPS
	// apart. The frames go to ffmpeg as raw Matroska, with timestamps.
	Times []float64
	// InputPixFmt is the pixel format of the frames given to Write:
	// "rgb24" (the default) or another format FrameSize knows, such as
	// "yuv420p".
	InputPixFmt string
	// Codec is the ffmpeg video encoder, e.g. "libx264" (the default),
	// "libx265" or "ffv1".
	Codec string
	// CRF is the constant rate factor for encoders that have one (libx264,
	// libx265, libvpx, libvpx-vp9, libaom-av1, libsvtav1); it is ignored by
	// the others (ffv1). -1 leaves the encoder's default. 0 is a real value
	// (lossless for libx264), so set -1 explicitly for the default.
	CRF int
	// Preset is the encoder preset (e.g. "medium", "slow"); "" leaves the
	// default. It is passed only to libx264 and libx265.
	Preset string
	// PixFmt is the pixel format of the output, default "yuv420p". With
	// ffv1 and "gbrp" the output is lossless RGB.
	PixFmt string
	// CarryOptions name the source whose streams and metadata the output
	// carries besides the video (see planStreams): its audio (copied when
	// the output container can hold the codec, else re-encoded: AAC for
	// MP4/MOV, Opus or Vorbis for WebM), subtitles, attachments, chapters,
	// tags and timecode. Encoder.Carried reports what was carried and
	// dropped.
	CarryOptions
	// Colour is the input's colour description: the output is tagged
	// with it, and RGB frames are converted to a YUV PixFmt with its
	// matrix and range. Frames given as YUV (InputPixFmt) must already be
	// in them. The zero Colour leaves the output untagged, converted with
	// ffmpeg's default (BT.601, limited range).
	Colour Colour
	// HDR is the input's HDR metadata: the static kind is written by
	// libx265 and libsvtav1 (and reported dropped for other encoders);
	// the dynamic kind is reported dropped. nil: none.
	HDR *HDR
	// SAR is the output's sample aspect ratio; the zero value leaves
	// square pixels.
	SAR Rational
	// Threads, if > 0, caps the encoder's threads (-threads), for when
	// several encoders share the CPU.
	Threads int
	// ExpectFrames, if > 0, makes Close fail unless exactly this many frames
	// were written.
	ExpectFrames int
	// Intermediate marks an output that is joined into another file and
	// then removed (a segment): Close moves it into place without forcing
	// it to disk first. Outputs are otherwise synced before the rename, so
	// that a crash never leaves a truncated file under the output's name.
	Intermediate bool
	// Options are more encoder options, ffmpeg's "-key value" as
	// "key=value" (e.g. "x265-params=aq-mode=3"), given after vsr's own.
	Options []string
	// AlphaFrom, if set, is a probed input (a still image, or a video of
	// which the first ExpectFrames frames are written) whose alpha plane
	// the output takes: turned upright as the Decoder turns its colour,
	// scaled to Width x Height by bicubic interpolation and merged with
	// the frames written, frame by frame. An output PixFmt without alpha
	// gets the colour flattened on white instead (each pixel's colour
	// blended with white by its alpha).
	AlphaFrom *Info
	// ICC, if set, is an ICC profile written into the output (see
	// EmbedICC; other outputs than PNG, JPEG and WebP are refused).
	ICC []byte
	// NoReplace makes Close fail with ErrExists, leaving the file alone,
	// when the output path exists by the time the output is finished
	// (checked and renamed in one atomic step).
	NoReplace bool
}

// Encoder feeds raw frames to an ffmpeg child that encodes them into a
// temporary file beside the output path; Close moves it into place. An
// Encoder is not safe for concurrent use.
type Encoder struct {
	ctx     context.Context
	tools   tools
	cmd     *exec.Cmd
	in      io.WriteCloser
	tail    *logTail
	prog    *progress
	outPath string
	tmpPath string
	wd      *Workdir // where tmpPath is
	codec   string
	size    int
	expect  int
	sync    bool // fsync before the rename (see EncodeOptions.Intermediate)
	keep    bool // EncodeOptions.NoReplace
	written int
	reaped  bool
	waitErr error
	closed  bool  // Close or Abort ran; the temp file is gone or renamed
	err     error // first failure; returned by later calls
	mkv     *mkvWriter
	times   []float64 // EncodeOptions.Times
	icc     []byte    // EncodeOptions.ICC, embedded before the rename
	ext     string
	width   int
	height  int
	carried Carried
}

// NewEncoder checks opt and the output location, then starts ffmpeg reading
// raw frames from a pipe and writing to a temporary file beside outPath:
// same directory, a hidden name, the same extension (the muxer is chosen
// from the extension). The output directory must exist and be writable; if
// not, NewEncoder says so without starting ffmpeg. Nothing appears at
// outPath until Close succeeds; an existing file there is then replaced.
// The child is killed when ctx is done; call Close or Abort in every case to
// reap it and remove the temporary file (only a crash of this process can
// leave a hidden ".NAME.vsr-*.EXT" file behind). The output carries
// opt.Colour, HDR and SAR, and the streams of opt.StreamsFrom; Carried
// says what it carries and drops.
func NewEncoder(ctx context.Context, outPath string, opt EncodeOptions) (*Encoder, error) {
	o, err := normalizeEncodeOptions(opt)
	if err != nil {
		return nil, fmt.Errorf("encode %q: %w", outPath, err)
	}
	size, err := FrameSize(o.InputPixFmt, o.Width, o.Height)
	if err != nil {
		return nil, fmt.Errorf("encode %q: input %w", outPath, err)
	}
	ext := filepath.Ext(outPath)
	if ext == "" || ext == "." {
		return nil, fmt.Errorf("output %q has no file extension: add one (.mp4, .mkv, .webm, .mov) so the container format is known", outPath)
	}
	t, err := resolveTools()
	if err != nil {
		return nil, err
	}
	if err := checkEncoder(ctx, t.ffmpeg, o.Codec); err != nil {
		return nil, fmt.Errorf("encode %q: %w", outPath, err)
	}
	if len(o.ICC) > 0 && !CanEmbedICC(strings.ToLower(ext)) {
		return nil, fmt.Errorf("encode %q: %s files cannot carry an ICC profile here (PNG, JPEG and WebP do)", outPath, ext)
	}
	if o.AlphaFrom != nil && o.Times != nil {
		return nil, fmt.Errorf("encode %q: an alpha plane is merged into frames evenly spaced only (no Times)", outPath)
	}

	if slices.Contains(imageCodecs, o.Codec) {
		o.CarryOptions = CarryOptions{} // a picture carries no streams
	}
	streams, err := planStreams(ctx, t, o.CarryOptions, ext, 1, nil)
	if err != nil {
		return nil, fmt.Errorf("encode %q: reading %s: %w", outPath, o.StreamsFrom, err)
	}
	tags := planVideoTags(ctx, t.ffmpeg, o)

	wd, tmp, err := reserveTemp(outPath, ext)
	if err != nil {
		return nil, err
	}

	args := append([]string{}, baseArgs...)
	args = append(args, "-progress", "pipe:1")
	if o.Times != nil {
		args = append(args, "-f", "matroska", "-i", "pipe:0")
	} else {
		args = append(args, "-f", "rawvideo", "-pix_fmt", o.InputPixFmt, "-s", fmt.Sprintf("%dx%d", o.Width, o.Height),
			"-framerate", o.FPS.String(), "-i", "pipe:0")
	}
	sin, err := streams.inputs(wd)
	if err != nil {
		wd.Remove()
		return nil, fmt.Errorf("encode %q: %v", outPath, err)
	}
	args = append(args, sin...)
	if o.AlphaFrom != nil {
		in := 1 + streams.count() // the alpha's input: after the frames and the streams' source
		args = append(args, orientArgs(o.AlphaFrom.Orientation)...)
		args = append(args, inputArgs(o.AlphaFrom.Path, o.AlphaFrom.AllowPlaylists)...)
		g := alphaGraph(o, in)
		if len(tags.filters) > 0 { // one graph: -vf cannot join -filter_complex
			g = strings.TrimSuffix(g, "[v]") + "," + strings.Join(tags.filters, ",") + "[v]"
			tags.filters = nil
		}
		args = append(args, "-filter_complex", g, "-map", "[v]")
	} else {
		args = append(args, "-map", "0:0")
	}
	args = append(args, streams.output...)
	args = append(args, videoArgs(o, ext, tags)...)
	args = append(args, passthroughArgs(ctx, t.ffmpeg)...)
	if o.Times != nil {
		// The encoder's clock: microseconds, as the frames' timestamps
		// (its default, 1/FPS, would round them to the nominal rate).
		args = append(args, "-enc_time_base:v", "1:1000000")
		if e := strings.ToLower(ext); e == ".mp4" || e == ".mov" || e == ".m4v" {
			args = append(args, "-video_track_timescale", "1000000")
		}
	}
	args = append(args, "-max_muxing_queue_size", "4096", "-y", fileArg(tmp))

	cmd := command(ctx, t.ffmpeg, args...)
	tail := newLogTail()
	prog := &progress{frame: -1}
	cmd.Stderr = tail
	cmd.Stdout = prog
	pr, in, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("encode %q: %v", outPath, err)
	}
	growPipe(in)
	cmd.Stdin = pr
	err = cmd.Start()
	pr.Close() // the child has its copy
	if err != nil {
		in.Close()
		wd.Remove()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("encode %q: %w", outPath, cerr)
		}
		return nil, fmt.Errorf("%w: cannot run %s: %v", ErrNoFFmpeg, t.ffmpeg, err)
	}
	e := &Encoder{
		ctx: ctx, tools: t, cmd: cmd, in: in, tail: tail, prog: prog,
		outPath: outPath, tmpPath: tmp, wd: wd, codec: o.Codec,
		size: size, expect: o.ExpectFrames, sync: !o.Intermediate, keep: o.NoReplace,
		icc: o.ICC, ext: strings.ToLower(ext), width: o.Width, height: o.Height,
		carried: tags.report,
	}
	e.carried.Add(streams.report)
	if o.Times != nil {
		e.times = o.Times
		if e.mkv, err = newMKVWriter(in, o.InputPixFmt, o.Width, o.Height); err != nil {
			e.Abort()
			return nil, fmt.Errorf("encode %q: %w", outPath, err)
		}
	}
	return e, nil
}

func normalizeEncodeOptions(o EncodeOptions) (EncodeOptions, error) {
	if o.Width <= 0 || o.Height <= 0 {
		return o, fmt.Errorf("frame size %dx%d is not valid: width and height must be positive", o.Width, o.Height)
	}
	if !o.FPS.Valid() {
		return o, fmt.Errorf("frame rate %s is not valid: give a positive rate such as 24/1 or 30000/1001", o.FPS)
	}
	o.FPS = o.FPS.Reduced()
	if o.InputPixFmt == "" {
		o.InputPixFmt = "rgb24"
	}
	if o.Codec == "" {
		o.Codec = "libx264"
	}
	if o.PixFmt == "" {
		o.PixFmt = "yuv420p"
	}
	for _, kv := range o.Options {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "-") || strings.ContainsFunc(k, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':')
		}) {
			return o, fmt.Errorf("encoder option %q: want key=value, e.g. x265-params=aq-mode=3 or tune=film", kv)
		}
	}
	if o.ExpectFrames < 0 {
		return o, fmt.Errorf("ExpectFrames %d is negative: use 0 for no check", o.ExpectFrames)
	}
	for _, pf := range []struct{ name, what string }{{o.InputPixFmt, "input pixel format"}, {o.PixFmt, "pixel format"}} {
		aw, ah := chromaAlign(pf.name)
		if o.Width%aw != 0 || o.Height%ah != 0 {
			size := "an even width and height"
			switch {
			case aw == 2 && ah == 1:
				size = "an even width"
			case aw == 4:
				size = "a width (and height) divisible by 4"
			}
			return o, fmt.Errorf("%s with %s %s needs %s, got %dx%d: use an even size or --pix-fmt yuv444p/gbrp",
				o.Codec, pf.what, pf.name, size, o.Width, o.Height)
		}
	}
	return o, nil
}

// Carried says what the output carries besides the picture (colour tags,
// HDR metadata, SAR and the source's streams and metadata) and what it
// drops, and why.
func (e *Encoder) Carried() Carried { return e.carried }

// FrameSize is the number of bytes Write expects per frame: Width*Height*3
// for rgb24.
func (e *Encoder) FrameSize() int { return e.size }

// Written is the number of frames written so far.
func (e *Encoder) Written() int { return e.written }

// TempPath is the file ffmpeg writes to, in a private directory beside the
// output, until Close renames it into place.
func (e *Encoder) TempPath() string { return e.tmpPath }

// Write sends one frame of exactly FrameSize bytes to ffmpeg. If ffmpeg has
// failed, Write returns its error (and the temporary file is removed); the
// caller should then stop and call Abort or Close.
func (e *Encoder) Write(frame []byte) error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return fmt.Errorf("encode %q: Write after Close", e.outPath)
	}
	if len(frame) != e.size {
		return fmt.Errorf("encode %q: frame of %d bytes, want %d (FrameSize)", e.outPath, len(frame), e.size)
	}
	var err error
	if e.mkv != nil {
		if e.written >= len(e.times) {
			return e.failf("frame %d has no timestamp (%d given)", e.written, len(e.times))
		}
		err = e.mkv.WriteFrame(micros(e.times[e.written]), frame)
	} else {
		_, err = e.in.Write(frame)
	}
	if err != nil {
		// ffmpeg stopped reading: it exited or is exiting.
		e.in.Close()
		e.reap()
		return e.failf("ffmpeg stopped after %d frames", e.written)
	}
	e.written++
	return nil
}

// Close finishes the output: it closes ffmpeg's input, waits for it, checks
// its exit status and that it encoded every frame written (and exactly
// ExpectFrames, if set), checks the file before it is published (see
// outputCheck: no write error on ffmpeg's stderr whatever its exit status,
// a non-empty file forced to disk, one that reads back whole with a video
// packet per frame written), then renames the temporary file onto outPath
// atomically. On any failure it removes the temporary file, leaves a file
// at outPath as it was, and returns an error carrying ffmpeg's last
// meaningful message: one wrapping ErrDiskFull when the disk was full,
// ErrIncomplete when the file is not whole. Calling Close again returns
// the same result.
func (e *Encoder) Close() error {
	if e.closed || e.err != nil {
		e.closed = true
		return e.err
	}
	if e.expect > 0 && e.written != e.expect {
		e.kill()
		return e.fail(fmt.Errorf("encode %q: %d frames were written but %d were expected; the output was discarded", e.outPath, e.written, e.expect))
	}
	if e.written == 0 {
		e.kill()
		return e.fail(fmt.Errorf("encode %q: no frames were written; the output was discarded", e.outPath))
	}
	e.in.Close()
	if err := e.reap(); err != nil {
		return e.failf("ffmpeg failed")
	}
	if e.ctx.Err() != nil {
		return e.failf("ffmpeg failed")
	}
	check := e.check()
	if err := check.written(); err != nil {
		return e.fail(err)
	}
	if got := e.prog.frames(); got >= 0 && got != e.written {
		return e.fail(fmt.Errorf("encode %q: ffmpeg encoded %d frames but %d were written; the output was discarded", e.outPath, got, e.written))
	}
	if len(e.icc) > 0 {
		if err := EmbedICC(e.tmpPath, e.ext, e.icc, e.width, e.height); err != nil {
			if isDiskFull(err) {
				return e.fail(check.diskFull())
			}
			return e.fail(fmt.Errorf("encode %q: %v", e.outPath, err))
		}
	}
	if err := check.readBack(e.ctx, e.tools); err != nil {
		return e.fail(err)
	}
	if err := moveIntoPlace(e.tmpPath, e.outPath, e.keep); err != nil {
		if errors.Is(err, ErrExists) {
			return e.fail(fmt.Errorf("encode %q: %w (created while this output was made); the new output was discarded", e.outPath, ErrExists))
		}
		return e.fail(fmt.Errorf("encode %q: cannot move the finished file into place: %v", e.outPath, err))
	}
	e.wd.Remove()
	e.closed = true
	return nil
}

// Abort kills ffmpeg and removes the temporary file, leaving nothing at
// outPath. Use it on any upstream error. It is safe to call more than once
// and after Close (then it does nothing).
func (e *Encoder) Abort() {
	if e.closed {
		return
	}
	e.kill()
	if e.err == nil {
		e.err = fmt.Errorf("encode %q: aborted", e.outPath)
	}
	e.wd.Remove()
	e.closed = true
}

// kill stops and reaps ffmpeg.
func (e *Encoder) kill() {
	if !e.reaped && e.cmd.Process != nil {
		_ = e.cmd.Process.Kill()
	}
	e.in.Close()
	e.reap()
}

func (e *Encoder) reap() error {
	if !e.reaped {
		e.reaped = true
		e.waitErr = e.cmd.Wait()
	}
	return e.waitErr
}

// fail records err, removes the temporary file and returns err.
func (e *Encoder) fail(err error) error {
	e.kill()
	e.wd.Remove()
	e.err = err
	e.closed = true
	return err
}

// check is what Close checks of the output before it is published.
func (e *Encoder) check() outputCheck {
	return outputCheck{path: e.tmpPath, what: fmt.Sprintf("encode %q", e.outPath), tail: e.tail, sync: e.sync,
		packets: e.written, muxed: e.prog.frames(), wrote: e.written}
}

// failf reports a failure of the ffmpeg child itself, with its message;
// one for want of room on the disk wraps ErrDiskFull.
func (e *Encoder) failf(format string, args ...any) error {
	if cerr := e.ctx.Err(); cerr != nil {
		return e.fail(fmt.Errorf("encode %q: %w", e.outPath, cerr))
	}
	if _, full := writeFailure(e.tail); full {
		return e.fail(e.check().diskFull())
	}
	msg := describe(e.tail, e.waitErr)
	hint := ""
	if strings.Contains(msg, "Unknown encoder") {
		hint = `: run "ffmpeg -encoders" to list the encoders available`
	}
	return e.fail(fmt.Errorf("encode %q with %s: %s (ffmpeg: %s)%s", e.outPath, e.codec, fmt.Sprintf(format, args...), msg, hint))
}

// checkFile reports an error unless path is a non-empty file, and forces
// it to disk when sync is set.
func checkFile(path string, sync bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err == nil && st.Size() == 0 {
		err = errors.New("empty file")
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// progress parses ffmpeg's -progress output, keeping the last frame count.
type progress struct {
	mu    sync.Mutex
	buf   []byte
	frame int // -1 until reported
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(p.buf[:i]))
		p.buf = p.buf[i+1:]
		if v, ok := strings.CutPrefix(line, "frame="); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				p.frame = n
			}
		}
	}
	if len(p.buf) > 4096 {
		p.buf = p.buf[:0]
	}
	return len(b), nil
}

func (p *progress) frames() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frame
}

// encoderLists caches, per ffmpeg executable, the set of encoder names.
var encoderLists sync.Map // string -> map[string]bool

// encoders returns the encoders ffmpeg has, or nil if it cannot tell.
func encoders(ctx context.Context, ffmpeg string) map[string]bool {
	if v, ok := encoderLists.Load(ffmpeg); ok {
		return v.(map[string]bool)
	}
	r := runTool(ctx, ffmpeg, "-hide_banner", "-nostdin", "-encoders")
	if r.err != nil {
		return nil
	}
	set := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(r.stdout))
	started := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "------") {
			started = true
			continue
		}
		f := strings.Fields(line)
		if started && len(f) >= 2 && len(f[0]) == 6 {
			set[f[1]] = true
		}
	}
	if len(set) == 0 {
		return nil
	}
	encoderLists.Store(ffmpeg, set)
	return set
}

// pixFmtLists caches, per ffmpeg executable and encoder, EncoderPixFmts'
// answers.
var pixFmtLists sync.Map // "ffmpeg|codec" -> func(string) bool

// EncoderPixFmts reports whether encoder codec takes a pixel format, by
// the list of `ffmpeg -h encoder=codec` (for a format it does not take,
// ffmpeg picks another itself, with a warning only); any format when the
// list cannot be read.
func EncoderPixFmts(ctx context.Context, codec string) func(string) bool {
	all := func(string) bool { return true }
	t, err := resolveTools()
	if err != nil || codec == "" || strings.HasPrefix(codec, "-") {
		return all
	}
	key := t.ffmpeg + "|" + codec
	if v, ok := pixFmtLists.Load(key); ok {
		return v.(func(string) bool)
	}
	r := runTool(ctx, t.ffmpeg, "-hide_banner", "-nostdin", "-h", "encoder="+codec)
	if r.err != nil {
		return all
	}
	takes := all
	for _, line := range strings.Split(string(r.stdout), "\n") {
		if list, ok := strings.CutPrefix(strings.TrimSpace(line), "Supported pixel formats:"); ok {
			names := strings.Fields(list)
			takes = func(pf string) bool { return slices.Contains(names, pf) }
		}
	}
	pixFmtLists.Store(key, takes)
	return takes
}

// checkEncoder rejects an encoder name this ffmpeg does not have.
func checkEncoder(ctx context.Context, ffmpeg, codec string) error {
	set := encoders(ctx, ffmpeg)
	if set == nil || set[codec] {
		return nil
	}
	return fmt.Errorf("unknown video encoder %q: this ffmpeg does not have it; run \"ffmpeg -encoders\" to list the available ones", codec)
}

// audioCopyOK lists, per output extension, the audio codecs the container
// can hold as they are; nil means any codec (Matroska).
var audioCopyOK = map[string][]string{
	".mp4":  {"aac", "mp3", "ac3", "eac3", "alac"},
	".m4v":  {"aac", "mp3", "ac3", "eac3", "alac"},
	".mov":  {"aac", "mp3", "ac3", "eac3", "alac", "pcm_s16le", "pcm_s16be", "pcm_s24le", "pcm_s24be"},
	".webm": {"opus", "vorbis"},
	".ogv":  {"opus", "vorbis", "flac"},
	".ogg":  {"opus", "vorbis", "flac"},
	".avi":  {"mp3", "ac3", "pcm_s16le"},
	".flv":  {"aac", "mp3"},
	".ts":   {"aac", "mp3", "mp2", "ac3", "eac3", "opus"},
	".m2ts": {"aac", "mp3", "mp2", "ac3", "eac3"},
}

// audioReencode lists, per output extension, the audio encoders to use
// when copying is not possible, in order of preference.
var audioReencode = map[string][]string{
	".webm": {"libopus", "libvorbis"},
	".ogv":  {"libvorbis", "libopus"},
	".ogg":  {"libvorbis", "libopus"},
	".avi":  {"libmp3lame", "ac3"},
	".flv":  {"aac"},
}

// audioCodec returns how an audio stream of codec c from src goes into a
// file of extension ext: "copy" when the container can hold it as it is,
// else the first encoder of audioReencode's this ffmpeg has.
func audioCodec(ctx context.Context, t tools, src, c, ext string) (string, error) {
	if ok, known := audioCopyOK[ext]; !known || contains(ok, c) {
		return "copy", nil
	}
	prefs := audioReencode[ext]
	if prefs == nil {
		prefs = []string{"aac"}
	}
	set := encoders(ctx, t.ffmpeg)
	for _, p := range prefs {
		if set == nil || set[p] {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: its %s audio cannot go into a %s file and this ffmpeg has none of %s to re-encode it: use .mkv", src, c, ext, strings.Join(prefs, ", "))
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// encodeChecks remembers CheckEncode's answers per ffmpeg and settings.
var encodeChecks = checkCache{m: map[string]*checkEntry{}}

// runCheck runs CheckEncode's ffmpeg (a seam for tests).
var runCheck = runTool

// CheckEncode encodes one black frame with opt's video settings into a
// temporary file of extension ext, so that what ffmpeg would refuse (an
// extension no muxer knows, a codec the container cannot hold, an unknown
// preset, pixel format or encoder option) is reported before any work,
// with ffmpeg's own message and what to use instead. Width, Height and FPS
// may be left zero. Answers are cached per ffmpeg and settings.
func CheckEncode(ctx context.Context, ext string, opt EncodeOptions) error {
	name := strings.TrimPrefix(ext, ".")
	if name == "" || len(name) > 16 || strings.ContainsFunc(name, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}) {
		return fmt.Errorf("output extension %q is not a container name: use .mp4, .mkv, .webm or .mov", ext)
	}
	opt.Width, opt.Height, opt.FPS, opt.InputPixFmt, opt.ExpectFrames = 64, 64, Rational{24, 1}, "", 0
	o, err := normalizeEncodeOptions(opt)
	if err != nil {
		return err
	}
	t, err := resolveTools()
	if err != nil {
		return err
	}
	if err := checkEncoder(ctx, t.ffmpeg, o.Codec); err != nil {
		return err
	}
	key := fmt.Sprintf("%s|%s|%s|%d|%s|%s|%q", t.ffmpeg, strings.ToLower(ext), o.Codec, o.CRF, o.Preset, o.PixFmt, o.Options)
	return encodeChecks.do(ctx, key, func() error {
		f, err := os.CreateTemp("", "vsr-check-*"+ext)
		if err != nil {
			return err
		}
		f.Close()
		defer os.Remove(f.Name())
		args := append([]string{}, baseArgs...)
		args = append(args, "-f", "lavfi", "-i", "color=black:s=64x64:r=24", "-frames:v", "1")
		args = append(args, videoArgs(o, ext, videoTags{})...)
		r := runCheck(ctx, t.ffmpeg, append(args, "-y", fileArg(f.Name()))...)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.err != nil {
			msg := describe(r.tail, r.err)
			return fmt.Errorf("ffmpeg cannot write %s into a %s file with pixel format %s%s (%s)%s", o.Codec, ext, o.PixFmt, optionsNote(o.Options), msg, encodeHint(ext, o.Codec, msg))
		}
		return nil
	})
}

// checkCache keeps the answers of checks that run ffmpeg: a pass for
// good; a failure for failedCheckTTL (it may pass later: a busy GPU
// encoder), and at most maxFailedChecks failures, so that requests naming
// ever new bad settings cannot fill memory. Checks of the same settings at
// once share one run, and at most checkRuns run at a time.
type checkCache struct {
	mu     sync.Mutex
	m      map[string]*checkEntry
	failed int // failures in m
	slots  chan struct{}
}

type checkEntry struct {
	done chan struct{} // closed when err is known
	err  error
	at   time.Time
}

const (
	failedCheckTTL  = time.Minute
	maxFailedChecks = 1024
	checkRuns       = 4
)

// do returns key's answer, running run when there is none (or an
// expired failure). A run cut short by ctx is not kept.
func (c *checkCache) do(ctx context.Context, key string, run func() error) error {
	c.mu.Lock()
	if c.slots == nil {
		c.slots = make(chan struct{}, checkRuns)
	}
	for {
		e := c.m[key]
		if e == nil {
			break
		}
		select {
		case <-e.done:
			if e.err == nil || time.Since(e.at) < failedCheckTTL {
				c.mu.Unlock()
				return e.err
			}
			delete(c.m, key)
			c.failed--
		default: // another request is running this check: share its answer
			c.mu.Unlock()
			select {
			case <-e.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			c.mu.Lock()
		}
	}
	e := &checkEntry{done: make(chan struct{})}
	c.m[key] = e
	c.mu.Unlock()
	err := ctx.Err()
	select {
	case c.slots <- struct{}{}:
		err = run()
		<-c.slots
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(e.done)
	if ctx.Err() != nil {
		delete(c.m, key) // those waiting run it again
		return err
	}
	e.err, e.at = err, time.Now()
	if err != nil {
		if c.failed >= maxFailedChecks {
			c.dropFailures()
		}
		c.failed++
	}
	return err
}

// dropFailures forgets every failure kept; c.mu is held.
func (c *checkCache) dropFailures() {
	for k, e := range c.m {
		select {
		case <-e.done:
			if e.err != nil {
				delete(c.m, k)
			}
		default:
		}
	}
	c.failed = 0
}

func optionsNote(opts []string) string {
	if len(opts) == 0 {
		return ""
	}
	return " and options " + strings.Join(opts, " ")
}

// encodeHint says what to do about CheckEncode's failure msg.
func encodeHint(ext, codec, msg string) string {
	l := strings.ToLower(msg)
	switch {
	case strings.Contains(l, "preset"):
		return fmt.Sprintf(": --preset takes the presets of %s (ffmpeg -h encoder=%s), e.g. ultrafast ... veryslow for libx264 and libx265", codec, codec)
	case strings.Contains(l, "pixel format"):
		return fmt.Sprintf(": --pix-fmt takes the pixel formats of %s (ffmpeg -h encoder=%s), e.g. yuv420p", codec, codec)
	case strings.Contains(l, "option not found"), strings.Contains(l, "unrecognized option"):
		return ": an --encoder-opt is not an option of ffmpeg or of " + codec
	case strings.Contains(l, "cannot load"), strings.Contains(l, "no device"), strings.Contains(l, "no capable devices"), strings.Contains(l, "nvenc"), strings.Contains(l, "vaapi"):
		return ": " + codec + " needs hardware or libraries that are absent here; use libx264 or libx265"
	}
	switch strings.ToLower(ext) {
	case ".webm":
		return ": .webm takes libvpx-vp9, libvpx or libaom-av1; for " + codec + " use .mkv or .mp4"
	case ".mp4", ".mov", ".m4v", ".mkv", ".avi", ".nut", ".ts":
		return ": .mkv takes almost any codec (ffmpeg -h encoder=" + codec + " lists what " + codec + " takes)"
	}
	return ": use .mp4, .mkv, .webm or .mov"
}

// videoArgs are the output options of the video stream for o, into a file
// of extension ext, with the colour, HDR and SAR of tags.
func videoArgs(o EncodeOptions, ext string, tags videoTags) []string {
	var args []string
	if len(tags.filters) > 0 {
		args = append(args, "-vf", strings.Join(tags.filters, ","))
	}
	args = append(args, "-c:v", o.Codec)
	switch o.Codec {
	case "libx264", "libx264rgb", "libx265", "libvpx", "libvpx-vp9", "libaom-av1", "libsvtav1":
		if o.CRF >= 0 {
			args = append(args, "-crf", strconv.Itoa(o.CRF))
			if o.Codec == "libvpx-vp9" || o.Codec == "libaom-av1" {
				args = append(args, "-b:v", "0")
			}
		}
	}
	switch o.Codec {
	case "libx264", "libx264rgb", "libx265":
		if o.Preset != "" {
			args = append(args, "-preset", o.Preset)
		}
	}
	// vsr's encoder parameters and the user's go in one option: ffmpeg
	// keeps only the last of several.
	params := map[string][]string{}
	if o.Codec == "libx265" {
		params["x265-params"] = append([]string{"log-level=error"}, tags.x265...)
		if e := strings.ToLower(ext); e == ".mp4" || e == ".mov" || e == ".m4v" {
			args = append(args, "-tag:v", "hvc1") // what Apple players expect
		}
	}
	if len(tags.svtav1) > 0 {
		params["svtav1-params"] = tags.svtav1
	}
	args = append(args, "-pix_fmt", o.PixFmt)
	args = append(args, tags.args...)
	if o.Threads > 0 {
		args = append(args, "-threads", strconv.Itoa(o.Threads))
	}
	for _, kv := range o.Options {
		k, v, _ := strings.Cut(kv, "=")
		if p, ok := params[k]; ok {
			params[k] = append(p, v)
			continue
		}
		args = append(args, "-"+k, v)
	}
	for _, k := range []string{"x265-params", "svtav1-params"} {
		if p := params[k]; len(p) > 0 {
			args = append(args, "-"+k, strings.Join(p, ":"))
		}
	}
	return args
}

// alphaGraph is the filter graph that merges the alpha plane of
// o.AlphaFrom (ffmpeg's input in), upright and scaled to the output's
// size by bicubic interpolation, with the frames written (input 0), or
// flattens them on white when o.PixFmt has no alpha; its output is [v].
// It is made of numbers and fixed names only.
func alphaGraph(o EncodeOptions, in int) string {
	a := "alphaextract"
	if f := OrientFilter(o.AlphaFrom.Orientation); f != "" {
		a = f + "," + a
	}
	if o.ExpectFrames > 0 { // after alphaextract: before it, ffmpeg 5.1 cannot negotiate rgba64be or ya16be
		a += fmt.Sprintf(",trim=end_frame=%d", o.ExpectFrames)
	}
	// Alpha is full range, whatever range the input's colour is tagged with.
	g := fmt.Sprintf("[%d:%d]%s,scale=%d:%d:flags=bicubic:in_range=pc:out_range=pc[a];[0:0][a]alphamerge", in, o.AlphaFrom.VideoStream, a, o.Width, o.Height)
	if _, _, _, alpha := PixFmtInfo(o.PixFmt); !alpha {
		// On white: 255 - (255-c)*alpha, as a negation around a
		// premultiplication.
		g += ",format=gbrap,lutrgb=r=negval:g=negval:b=negval,premultiply=inplace=1,lutrgb=r=negval:g=negval:b=negval"
	}
	return g + "[v]"
}

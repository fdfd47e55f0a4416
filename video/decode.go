package video

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
)

// DecodeOptions controls a Decoder.
type DecodeOptions struct {
	// StartFrame skips this many frames first (counted exactly, by
	// decoding them), so several decoders can each take a segment.
	StartFrame int
	// MaxFrames stops after this many frames; 0 decodes all of them.
	MaxFrames int
	// PixFmt is the layout of the frames Read returns: "rgb24" (the
	// default, packed R,G,B bytes) or another raw format FrameSize knows:
	// "bgr24", "rgba", "bgra", "gray", "gbrp", "yuv444p", "yuv420p".
	PixFmt string
}

// Decoder streams the frames of a video, one per source frame, from an
// ffmpeg child through a pipe. It never holds more than the frame being read.
// A Decoder is not safe for concurrent use.
type Decoder struct {
	info      *Info
	cmd       *exec.Cmd
	out       io.ReadCloser
	tail      *logTail
	ctx       context.Context
	size      int
	expect    int // frames to deliver; 0 = unknown, read to the end
	read      int
	done      bool  // the child has been reaped
	err       error // sticky result once done
	extraByte []byte
}

// NewDecoder starts ffmpeg decoding the video stream of info.Path (info as
// returned by Probe, or by its Deinterlaced method: the Decoder then
// deinterlaces, and yields that Info's frames) to raw frames of
// info.Width x info.Height in the pixel format of opt.PixFmt. Frames are
// passed through without frame rate conversion (passthrough mode: -vsync
// or -fps_mode, whichever this ffmpeg has), so the Decoder yields exactly
// info.Frames frames. YCbCr is converted to an RGB PixFmt with
// info.Colour's matrix and range (ffmpeg's default, BT.601, when it has
// none); YCbCr converted to another YCbCr PixFmt keeps info.Colour's
// range. The child is killed when ctx is done or Close is called. When info.Frames is 0 (an
// Info not made by Probe) the Decoder reads until ffmpeg ends instead of
// checking the count. ffmpeg opens the file as Probe did: unless
// info.AllowPlaylists, the file alone, read by a video container's or
// image's demuxer (a playlist or list of files fails with ErrFormat's
// message). A still image with an EXIF orientation (Info.Orientation) is
// turned upright.
func NewDecoder(ctx context.Context, info *Info, opt DecodeOptions) (*Decoder, error) {
	if info == nil || info.Path == "" {
		return nil, errors.New("video.NewDecoder: no input: pass the Info returned by Probe")
	}
	if info.Width <= 0 || info.Height <= 0 {
		return nil, fmt.Errorf("video.NewDecoder: %q: frame size %dx%d is not valid: pass the Info returned by Probe", info.Path, info.Width, info.Height)
	}
	if opt.MaxFrames < 0 || opt.StartFrame < 0 {
		return nil, fmt.Errorf("video.NewDecoder: MaxFrames %d or StartFrame %d is negative: use 0 for all frames", opt.MaxFrames, opt.StartFrame)
	}
	if info.Frames > 0 && opt.StartFrame >= info.Frames {
		return nil, fmt.Errorf("video.NewDecoder: %q: start frame %d is past its %d frames", info.Path, opt.StartFrame, info.Frames)
	}
	pix := opt.PixFmt
	if pix == "" {
		pix = "rgb24"
	}
	size, err := FrameSize(pix, info.Width, info.Height)
	if err != nil {
		return nil, fmt.Errorf("video.NewDecoder: %w", err)
	}
	ffmpeg, err := FFmpeg()
	if err != nil {
		return nil, err
	}
	expect := info.Frames
	if expect > 0 {
		expect -= opt.StartFrame
	}
	if opt.MaxFrames > 0 && (expect == 0 || opt.MaxFrames < expect) {
		expect = opt.MaxFrames
	}
	args := append([]string{}, baseArgs...)
	filter := renumberFilter(info.FPS)
	deint := deinterlaceFilter(info)
	skip := opt.StartFrame // frames to drop after deinterlacing
	if opt.StartFrame > 0 && seekable(info) {
		// Accurate input seeking: ffmpeg decodes from the keyframe before
		// the target and drops the frames before it, so the first frame
		// out is frame seek (aimed half a frame early). A deinterlacer
		// reads the frame before the one it makes: it gets one more.
		seek := opt.StartFrame
		if deint != "" {
			per := info.fieldsPerFrame()
			seek = max(opt.StartFrame/per-1, 0) * per
		}
		if seek > 0 {
			t := info.StartTime + (float64(seek)-0.5)/info.FPS.Float()
			if len(info.Times) > seek { // the frames' own times
				t = info.StartTime + (info.Times[seek-1]+info.Times[seek])/2
			}
			args = append(args, "-ss", strconv.FormatFloat(t, 'f', 6, 64))
		}
		skip = opt.StartFrame - seek
	}
	if skip > 0 {
		filter = fmt.Sprintf("trim=start_frame=%d,%s", skip, filter)
	}
	if deint != "" {
		filter = deint + "," + filter
	}
	if o := OrientFilter(info.Orientation); o != "" {
		filter = o + "," + filter
	}
	args = append(args, orientArgs(info.Orientation)...)
	_, _, rgb, _ := PixFmtInfo(pix)
	_, _, inRGB, _ := PixFmtInfo(info.PixFmt)
	switch {
	case inRGB || pix == "gray":
	case rgb:
		// YCbCr to RGB with the input's matrix and range, whatever
		// this ffmpeg's default.
		if f := colourConvert(info.Colour, "in"); f != "" {
			filter += "," + f + ",format=" + pix
		}
	case pix != info.PixFmt && slices.Contains(colourRanges, info.Colour.Range):
		// YCbCr to YCbCr of another layout or depth keeps the range
		// (ffmpeg's automatic conversion makes full range limited):
		// the samples are only shifted.
		filter += ",scale=in_range=" + info.Colour.Range + ":out_range=" + info.Colour.Range + ",format=" + pix
	}
	args = append(args, inputArgs(info.Path, info.AllowPlaylists)...)
	args = append(args, "-map", "0:"+strconv.Itoa(info.VideoStream), "-vf", filter)
	args = append(args, passthroughArgs(ctx, ffmpeg)...)
	if opt.MaxFrames > 0 {
		args = append(args, "-frames:v", strconv.Itoa(opt.MaxFrames))
	}
	args = append(args, "-f", "rawvideo", "-pix_fmt", pix, "-s", fmt.Sprintf("%dx%d", info.Width, info.Height), "pipe:1")

	cmd := command(ctx, ffmpeg, args...)
	tail := newLogTail()
	cmd.Stderr = tail
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("decode %q: %v", info.Path, err)
	}
	if f, ok := out.(*os.File); ok {
		growPipe(f)
	}
	if err := cmd.Start(); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("decode %q: %w", info.Path, cerr)
		}
		return nil, fmt.Errorf("%w: cannot run %s: %v", ErrNoFFmpeg, ffmpeg, err)
	}
	return &Decoder{info: info, cmd: cmd, out: out, tail: tail, ctx: ctx, size: size, expect: expect}, nil
}

// FrameSize is the number of bytes of one frame: Width*Height*3 for rgb24.
func (d *Decoder) FrameSize() int { return d.size }

// Frames is the number of frames Read will deliver before io.EOF (0 when
// unknown).
func (d *Decoder) Frames() int { return d.expect }

// Read fills dst[:FrameSize()] with the next frame. After the last expected
// frame it returns io.EOF, once it has checked that ffmpeg ended cleanly. If
// ffmpeg ends early, fails, or reports decoding errors, Read returns an
// error (never io.EOF) such as "decoded only 5 of 7 frames: ...". After an
// error or io.EOF, Read keeps returning it.
func (d *Decoder) Read(dst []byte) error {
	if d.done {
		if d.err != nil {
			return d.err
		}
		return io.EOF
	}
	if len(dst) < d.size {
		return fmt.Errorf("video.Decoder.Read: buffer of %d bytes is smaller than a frame (%d bytes)", len(dst), d.size)
	}
	if d.expect > 0 && d.read >= d.expect {
		return d.finish()
	}
	n, err := io.ReadFull(d.out, dst[:d.size])
	if err == nil {
		d.read++
		if d.tail.Count() > 0 && !d.info.Truncated {
			// Decoding errors: the frames are damaged. Stop now rather
			// than after the whole video. (A truncated file's decodable
			// part ends in them.)
			d.kill()
			return d.fail(kindErrorf(ErrCorrupt, "decode %q: ffmpeg reported errors near frame %d (ffmpeg: %s)", d.info.Path, d.read, d.tail.Last()))
		}
		return nil
	}
	if err == io.EOF && d.expect == 0 {
		return d.finish()
	}
	// The pipe ended before the frame (or the expected count) was complete.
	werr := d.wait()
	if cerr := d.ctx.Err(); cerr != nil {
		return d.fail(fmt.Errorf("decode %q: %w", d.info.Path, cerr))
	}
	if err := refusedFormat(d.info.Path, result{tail: d.tail}); err != nil {
		return d.fail(fmt.Errorf("decode: %w", err))
	}
	what := fmt.Sprintf("decoded only %d of %d frames", d.read, d.expect)
	if d.expect == 0 {
		what = fmt.Sprintf("ffmpeg ended in the middle of frame %d (%d of %d bytes)", d.read+1, n, d.size)
	}
	return d.fail(kindErrorf(ErrCorrupt, "decode %q: %s: %s", d.info.Path, what, describe(d.tail, werr)))
}

// finish reaps ffmpeg after the last expected frame and decides between
// io.EOF and an error.
func (d *Decoder) finish() error {
	// Anything still in the pipe is a frame we did not expect.
	if d.extraByte == nil {
		d.extraByte = make([]byte, 1)
	}
	extra, _ := io.ReadFull(d.out, d.extraByte)
	if extra > 0 {
		d.kill()
		return d.fail(fmt.Errorf("decode %q: ffmpeg produced more than the %d frames Probe counted: probe the file again", d.info.Path, d.expect))
	}
	werr := d.wait()
	if cerr := d.ctx.Err(); cerr != nil {
		return d.fail(fmt.Errorf("decode %q: %w", d.info.Path, cerr))
	}
	if err := refusedFormat(d.info.Path, result{tail: d.tail}); err != nil && werr != nil {
		return d.fail(fmt.Errorf("decode: %w", err))
	}
	if (werr != nil || d.tail.Count() > 0) && !(d.info.Truncated && d.read == d.expect) {
		return d.fail(kindErrorf(ErrCorrupt, "decode %q: ffmpeg failed after %d frames (ffmpeg: %s)", d.info.Path, d.read, describe(d.tail, werr)))
	}
	return io.EOF
}

func (d *Decoder) fail(err error) error {
	d.err = err
	return err
}

func (d *Decoder) kill() {
	if !d.done && d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
	}
	d.wait()
}

// wait reaps the child once and returns its exit error.
func (d *Decoder) wait() error {
	if d.done {
		return nil
	}
	d.done = true
	return d.cmd.Wait()
}

// Close stops ffmpeg if it is still running (killing it and reaping it) and
// releases the pipe. Closing before the last frame is not an error. It is
// safe to call Close more than once and after Read returned an error.
func (d *Decoder) Close() error {
	if d.done {
		return nil
	}
	d.kill()
	if d.err == nil {
		d.err = errors.New("video.Decoder: Read after Close")
	}
	return nil
}

// seekable reports whether frames can be found by time: a constant frame
// rate, so that frame n starts at n/fps, in a container whose seeking
// ffmpeg gets right (in MPEG program and transport streams it lands on the
// next key frame, past the target). Otherwise decoders skip frames by
// counting them from the start.
func seekable(info *Info) bool {
	switch info.Format {
	case "mpeg", "mpegts", "mpegvideo":
		return false
	}
	if len(info.Times) == info.Frames+1 {
		return true // each frame's time is known
	}
	if !info.FPS.Valid() || info.Duration <= 0 || info.Frames <= 0 {
		return false
	}
	return math.Abs(info.Duration*info.FPS.Float()-float64(info.Frames)) <= 1.5
}

package video

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

const realClip = "../testdata/video/oa4_launch.webm"

func TestProbeClips(t *testing.T) {
	needFFmpeg(t)
	for _, c := range clips {
		t.Run(c.name, func(t *testing.T) {
			path := clipPath(t, c)
			probeModes(t, func(t *testing.T, tl tools) {
				info, err := probe(testCtx(t), path, tl)
				if err != nil {
					t.Fatal(err)
				}
				if info.Frames != c.frames {
					t.Errorf("Frames = %d, want %d", info.Frames, c.frames)
				}
				if info.FPS != c.fps {
					t.Errorf("FPS = %v, want %v", info.FPS, c.fps)
				}
				if info.Width != 64 || info.Height != 48 {
					t.Errorf("size = %dx%d, want 64x48", info.Width, info.Height)
				}
				if info.HasAudio != c.audio {
					t.Errorf("HasAudio = %v, want %v", info.HasAudio, c.audio)
				}
				if c.audio && info.AudioCodec == "" {
					t.Error("AudioCodec is empty")
				}
				if info.Codec != "h264" || info.PixFmt != "yuv420p" {
					t.Errorf("Codec, PixFmt = %q, %q, want h264, yuv420p", info.Codec, info.PixFmt)
				}
				if info.Path != path || info.Format == "" || info.Duration <= 0 {
					t.Errorf("Path, Format, Duration = %q, %q, %v", info.Path, info.Format, info.Duration)
				}
				mp4 := strings.HasSuffix(c.name, ".mp4")
				if tl.ffprobe != "" && mp4 && info.DeclaredFrames != c.frames {
					t.Errorf("DeclaredFrames = %d, want %d (MP4 states it)", info.DeclaredFrames, c.frames)
				}
				if !mp4 && info.DeclaredFrames != 0 {
					t.Errorf("DeclaredFrames = %d, want 0 (Matroska does not state it)", info.DeclaredFrames)
				}
			})
		})
	}
}

// TestProbeEnvNoFFprobe checks the public switch to the ffmpeg-only path.
func TestProbeEnvNoFFprobe(t *testing.T) {
	needFFmpeg(t)
	path := clipPath(t, clips[2])
	t.Setenv("VSR_FFPROBE", "none")
	if p, err := FFprobe(); p != "" || err != nil {
		t.Fatalf("FFprobe() = %q, %v with VSR_FFPROBE=none", p, err)
	}
	info, err := Probe(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Frames != 7 || info.FPS != (Rational{30000, 1001}) || !info.HasAudio || info.DeclaredFrames != 0 {
		t.Errorf("got %+v", info)
	}
	t.Setenv("VSR_FFPROBE", filepath.Join(t.TempDir(), "nope"))
	if _, err := Probe(testCtx(t), path); err == nil || !strings.Contains(err.Error(), "VSR_FFPROBE") {
		t.Errorf("Probe with a bad VSR_FFPROBE: %v, want an error naming it", err)
	}
}

func TestDecodeClips(t *testing.T) {
	needFFmpeg(t)
	for _, c := range clips {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			info, err := Probe(testCtx(t), clipPath(t, c))
			if err != nil {
				t.Fatal(err)
			}
			d, err := NewDecoder(testCtx(t), info, DecodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d.FrameSize() != 64*48*3 {
				t.Errorf("FrameSize = %d", d.FrameSize())
			}
			buf := make([]byte, d.FrameSize())
			n := 0
			for {
				err := d.Read(buf)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("frame %d: %v", n, err)
				}
				n++
			}
			if n != c.frames {
				t.Errorf("decoded %d frames, want %d", n, c.frames)
			}
			if err := d.Read(buf); err != io.EOF {
				t.Errorf("Read after EOF = %v, want io.EOF", err)
			}
			if err := d.Close(); err != nil {
				t.Error(err)
			}
			if err := d.Close(); err != nil {
				t.Error("second Close:", err)
			}
		})
	}
}

// TestDecodeFewerThanExpected checks the error when ffmpeg delivers fewer
// frames than the Info promised.
func TestDecodeFewerThanExpected(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	info, err := Probe(testCtx(t), clipPath(t, clips[3]))
	if err != nil {
		t.Fatal(err)
	}
	info.Frames = 9
	_, n, err := decodeAll(t, info, DecodeOptions{})
	if err == nil || err == io.EOF || !strings.Contains(err.Error(), "decoded only 7 of 9 frames") {
		t.Fatalf("after %d frames: err = %v, want \"decoded only 7 of 9 frames\"", n, err)
	}
	oneLine(t, err)
}

func TestDecodeCloseEarlyAndCancel(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	info, err := Probe(testCtx(t), realClip)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(testCtx(t), info, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, d.FrameSize())
	if err := d.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d.cmd.ProcessState == nil {
		t.Error("child not reaped")
	}
	if err := d.Read(buf); err == nil || err == io.EOF {
		t.Errorf("Read after Close = %v, want an error", err)
	}
	if err := d.Close(); err != nil {
		t.Error("second Close:", err)
	}

	ctx, cancel := contextWithCancel(t)
	d, err = NewDecoder(ctx, info, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	for i := 0; ; i++ {
		err := d.Read(buf)
		if err == nil {
			if i > info.Frames {
				t.Fatal("Read keeps succeeding after cancel")
			}
			continue // frames already in the pipe
		}
		if !errors.Is(err, ctx.Err()) {
			t.Errorf("Read after cancel = %v, want context.Canceled", err)
		}
		break
	}
}

func TestRealClip(t *testing.T) {
	needFFmpeg(t)
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), realClip, tl)
		if err != nil {
			t.Fatal(err)
		}
		if info.Width != 640 || info.Height != 360 || info.FPS != (Rational{24, 1}) || info.Frames != 194 || !info.HasAudio {
			t.Fatalf("got %dx%d %v fps %d frames audio=%v, want 640x360 24/1 194 frames with audio",
				info.Width, info.Height, info.FPS, info.Frames, info.HasAudio)
		}
		if info.Codec != "vp8" || info.AudioCodec != "vorbis" {
			t.Errorf("codecs %q, %q, want vp8, vorbis", info.Codec, info.AudioCodec)
		}
		d, err := NewDecoder(testCtx(t), info, DecodeOptions{MaxFrames: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if d.FrameSize() != 640*360*3 || d.Frames() != 5 {
			t.Fatalf("FrameSize, Frames = %d, %d", d.FrameSize(), d.Frames())
		}
		buf := make([]byte, d.FrameSize())
		for i := 0; i < 5; i++ {
			if err := d.Read(buf); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
		if err := d.Read(buf); err != io.EOF {
			t.Fatalf("6th Read = %v, want io.EOF", err)
		}
		if bytes.Count(buf, []byte{0}) == len(buf) {
			t.Error("frame 5 is all zero")
		}
	})
}

// roundTrip decodes src, encodes it with opt to dst and probes the result.
func roundTrip(t *testing.T, src, dst string, opt EncodeOptions) (in, out *Info, frames []byte) {
	t.Helper()
	ctx := testCtx(t)
	in, err := Probe(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(ctx, in, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	opt.Width, opt.Height, opt.FPS, opt.ExpectFrames = in.Width, in.Height, in.FPS, in.Frames
	if in.HasAudio {
		opt.StreamsFrom = src
	}
	e, err := NewEncoder(ctx, dst, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Abort()
	if e.FrameSize() != d.FrameSize() {
		t.Fatalf("encoder frame size %d, decoder %d", e.FrameSize(), d.FrameSize())
	}
	buf := make([]byte, d.FrameSize())
	for {
		err := d.Read(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, buf...)
		if err := e.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range dirEntries(t, filepath.Dir(dst)) {
		if strings.Contains(n, ".vsr-") {
			t.Errorf("temporary file %s left after Close", n)
		}
	}
	out, err = Probe(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if out.FPS != in.FPS || out.Frames != in.Frames || out.Width != in.Width || out.Height != in.Height {
		t.Errorf("output %v fps %d frames %dx%d, input %v fps %d frames %dx%d",
			out.FPS, out.Frames, out.Width, out.Height, in.FPS, in.Frames, in.Width, in.Height)
	}
	if out.HasAudio != in.HasAudio {
		t.Errorf("output HasAudio = %v, input %v", out.HasAudio, in.HasAudio)
	}
	return in, out, frames
}

func TestRoundTrip(t *testing.T) {
	needFFmpeg(t)
	type enc struct {
		name  string
		ext   string
		opt   EncodeOptions
		codec string
	}
	encs := []enc{
		{"x264", ".mp4", EncodeOptions{CRF: 18, Preset: "ultrafast"}, "h264"},
		{"x264-default", ".mkv", EncodeOptions{CRF: -1}, "h264"},
		{"x265", ".mp4", EncodeOptions{Codec: "libx265", CRF: 28, Preset: "ultrafast"}, "hevc"},
		{"ffv1", ".mkv", EncodeOptions{Codec: "ffv1", PixFmt: "gbrp", CRF: 10}, "ffv1"},
	}
	srcs := []clip{clips[0], clips[1], clips[2], clips[4]}
	for _, c := range srcs {
		for _, en := range encs {
			c, en := c, en
			t.Run(c.name+"/"+en.name, func(t *testing.T) {
				t.Parallel()
				src := clipPath(t, c)
				dst := filepath.Join(t.TempDir(), "out"+en.ext)
				_, out, frames := roundTrip(t, src, dst, en.opt)
				if out.Codec != en.codec {
					t.Errorf("output codec %q, want %q", out.Codec, en.codec)
				}
				if en.name == "ffv1" {
					// FFV1 stores RGB; its decoder reports 8-bit RGB as bgr0.
					if out.PixFmt != "gbrp" && out.PixFmt != "bgr0" {
						t.Errorf("output pix fmt %q, want gbrp or bgr0", out.PixFmt)
					}
					again, n, err := decodeAll(t, out, DecodeOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if n != c.frames || !bytes.Equal(again, frames) {
						t.Errorf("ffv1/gbrp round trip is not lossless (%d frames)", n)
					}
				}
			})
		}
	}
}

// TestRoundTripAudioReencode carries Opus audio into MP4 (re-encoded to
// AAC) and AAC audio into WebM (re-encoded to Opus or Vorbis).
func TestRoundTripAudioReencode(t *testing.T) {
	ff := needFFmpeg(t)
	t.Run("opus-to-mp4", func(t *testing.T) {
		t.Parallel()
		_, out, _ := roundTrip(t, clipPath(t, clips[1]), filepath.Join(t.TempDir(), "o.mp4"),
			EncodeOptions{CRF: 30, Preset: "ultrafast"})
		if out.AudioCodec != "aac" {
			t.Errorf("audio %q, want aac", out.AudioCodec)
		}
	})
	t.Run("aac-to-webm", func(t *testing.T) {
		t.Parallel()
		if !encoders(testCtx(t), ff)["libvpx-vp9"] {
			t.Skip("no libvpx-vp9")
		}
		_, out, _ := roundTrip(t, clipPath(t, clips[2]), filepath.Join(t.TempDir(), "o.webm"),
			EncodeOptions{Codec: "libvpx-vp9", CRF: 40})
		if out.AudioCodec != "opus" && out.AudioCodec != "vorbis" {
			t.Errorf("audio %q, want opus or vorbis", out.AudioCodec)
		}
	})
	t.Run("opus-copy-to-mkv", func(t *testing.T) {
		t.Parallel()
		_, out, _ := roundTrip(t, clipPath(t, clips[1]), filepath.Join(t.TempDir(), "o.mkv"),
			EncodeOptions{CRF: 30, Preset: "ultrafast"})
		if out.AudioCodec != "opus" {
			t.Errorf("audio %q, want opus (copied)", out.AudioCodec)
		}
	})
}

// TestEncodeYUVInput feeds yuv420p frames (the GPU path) to the encoder.
func TestEncodeYUVInput(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	src := clipPath(t, clips[3])
	in, err := Probe(testCtx(t), src)
	if err != nil {
		t.Fatal(err)
	}
	yuv, n, err := decodeAll(t, in, DecodeOptions{PixFmt: "yuv420p"})
	if err != nil {
		t.Fatal(err)
	}
	fs := 64*48 + 2*32*24
	if n != 7 || len(yuv) != 7*fs {
		t.Fatalf("decoded %d frames, %d bytes", n, len(yuv))
	}
	// An intermediate output (a segment, not synced to disk) is the same.
	for _, inter := range []bool{false, true} {
		dst := filepath.Join(t.TempDir(), "yuv.mkv")
		e, err := NewEncoder(testCtx(t), dst, EncodeOptions{Width: 64, Height: 48, FPS: in.FPS, InputPixFmt: "yuv420p", Codec: "ffv1", PixFmt: "yuv420p", CRF: -1, ExpectFrames: 7, Intermediate: inter})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := e.Write(yuv[i*fs : (i+1)*fs]); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		out, err := Probe(testCtx(t), dst)
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := decodeAll(t, out, DecodeOptions{PixFmt: "yuv420p"})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, yuv) {
			t.Errorf("ffv1 yuv420p round trip (intermediate %v) is not lossless", inter)
		}
	}
}

// TestRotated checks a clip with a 90 degree display rotation: ffmpeg
// rotates while decoding, so Info gives the rotated size.
func TestRotated(t *testing.T) {
	needFFmpeg(t)
	src := clipPath(t, clips[3])
	rot := fixture(t, "rotated.mp4", "-i", src, "-c", "copy", "-metadata:s:v:0", "rotate=90")
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), rot, tl)
		if err != nil {
			t.Fatal(err)
		}
		if info.Rotation == 0 {
			t.Skip("this ffmpeg did not store the rotation")
		}
		if info.Width != 48 || info.Height != 64 || info.Frames != 7 {
			t.Fatalf("got %dx%d, %d frames, rotation %d; want 48x64, 7 frames", info.Width, info.Height, info.Frames, info.Rotation)
		}
		all, n, err := decodeAll(t, info, DecodeOptions{})
		if err != nil || n != 7 || len(all) != 7*48*64*3 {
			t.Fatalf("decoded %d frames, %d bytes: %v", n, len(all), err)
		}
	})
}

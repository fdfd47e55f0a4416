package video

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// badFile writes a damaged copy of a generated clip.
func badFile(t *testing.T, name string, damage func([]byte) []byte) string {
	t.Helper()
	// 30 all-intra frames, index at the front: cutting the file leaves
	// some frames decodable.
	src := fixture(t, "thirty_intra.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=24",
		"-frames:v", "30", "-c:v", "libx264", "-g", "1", "-pix_fmt", "yuv420p", "-movflags", "+faststart")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, damage(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// probeAndDecode probes path and, if that succeeds, decodes all of it. It
// fails the test if both succeed with a frame count below want (when
// want > 0) and returns the first error.
func probeAndDecode(t *testing.T, path string, tl tools) error {
	t.Helper()
	info, err := probe(testCtx(t), path, tl)
	if err != nil {
		return err
	}
	_, _, err = decodeAll(t, info, DecodeOptions{})
	return err
}

func TestBadInputs(t *testing.T) {
	needFFmpeg(t)
	text := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(text, []byte("hello world\nthese are my notes, not a video\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "zero.txt")
	os.WriteFile(empty, nil, 0o644)
	truncated := badFile(t, "cut.mp4", func(b []byte) []byte { return b[:len(b)/2] })
	corrupt := badFile(t, "corrupt.mp4", func(b []byte) []byte {
		for i := len(b) / 2; i < len(b)/2+len(b)/8; i++ {
			b[i] = byte(i*37 + 11)
		}
		return b
	})
	// A Matroska file with an audio stream and a video stream of no frames.
	noFrames := fixture(t, "no_frames.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=24:d=1",
		"-f", "lavfi", "-i", "sine=d=1", "-map", "0:v", "-map", "1:a",
		"-vf", "trim=start_frame=1000", "-c:v", "libx264", "-c:a", "aac")
	// Without +faststart the index is at the end: a cut file has none.
	noIndexSrc := fixture(t, "thirty_intra_tail_index.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=24",
		"-frames:v", "30", "-c:v", "libx264", "-g", "1", "-pix_fmt", "yuv420p")
	noIndexData, err := os.ReadFile(noIndexSrc)
	if err != nil {
		t.Fatal(err)
	}
	noIndex := filepath.Join(t.TempDir(), "noindex.mp4")
	os.WriteFile(noIndex, noIndexData[:len(noIndexData)/2], 0o644)
	audioOnly := fixture(t, "audio_only.m4a", "-f", "lavfi", "-i", "sine=d=0.2", "-c:a", "aac")

	cases := []struct {
		name, path string
		kind       error  // wanted sentinel, nil = any error
		msg        string // wanted substring
	}{
		{"missing", filepath.Join(t.TempDir(), "x.mp4"), fs.ErrNotExist, "no such file"},
		{"directory", t.TempDir(), nil, "is a directory"},
		{"text", text, ErrNotVideo, "is not a video file ("},
		{"empty", empty, ErrNotVideo, "empty file"},
		{"truncated", truncated, nil, ""},
		{"corrupt", corrupt, nil, ""},
		{"no-index", noIndex, ErrTruncated, "is incomplete"},
		{"no-frames", noFrames, ErrNoFrames, "has no video frames"},
		{"audio-only", audioOnly, ErrNotVideo, "has no video stream"},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			probeModes(t, func(t *testing.T, tl tools) {
				err := probeAndDecode(t, c.path, tl)
				if err == nil || err == io.EOF {
					t.Fatalf("no error for %s", c.name)
				}
				oneLine(t, err)
				if c.kind != nil && !errors.Is(err, c.kind) {
					t.Errorf("error %q does not wrap %v", err, c.kind)
				}
				if !strings.Contains(err.Error(), c.msg) {
					t.Errorf("error %q does not contain %q", err, c.msg)
				}
				t.Logf("%s: %v", c.name, err)
			})
		})
	}
}

// TestDecodeDamaged decodes damaged files with the Info of the intact one,
// as if the file had changed after Probe: the Decoder itself must fail.
func TestDecodeDamaged(t *testing.T) {
	needFFmpeg(t)
	t.Parallel()
	good := badFile(t, "good.mp4", func(b []byte) []byte { return b })
	info, err := Probe(testCtx(t), good)
	if err != nil || info.Frames != 30 {
		t.Fatalf("Probe = %+v, %v", info, err)
	}
	for name, damage := range map[string]func([]byte) []byte{
		"cut": func(b []byte) []byte { return b[:len(b)/2] },
		"garbage": func(b []byte) []byte {
			for i := len(b) / 2; i < len(b)/2+len(b)/8; i++ {
				b[i] = byte(i*37 + 11)
			}
			return b
		},
		"garbage-late": func(b []byte) []byte {
			for i := len(b) * 7 / 8; i < len(b)*7/8+200; i++ {
				b[i] = byte(i*13 + 5)
			}
			return b
		},
	} {
		bad := *info
		bad.Path = badFile(t, name+".mp4", damage)
		_, n, err := decodeAll(t, &bad, DecodeOptions{})
		if err == nil {
			t.Errorf("%s: decoded %d frames without an error", name, n)
			continue
		}
		oneLine(t, err)
		t.Logf("%s: after %d frames: %v", name, n, err)
	}
}

// TestTruncatedMessage checks the wording when the container states the
// frame count (ffprobe path).
func TestTruncatedMessage(t *testing.T) {
	needFFmpeg(t)
	tl := withFFprobe(t)
	path := badFile(t, "cut.mp4", func(b []byte) []byte { return b[:len(b)/2] })
	_, err := probe(testCtx(t), path, tl)
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "is truncated: the container says 30 frames but only ") {
		t.Fatalf("err = %v, want ErrTruncated naming 30 frames", err)
	}
}

// newTestEncoder returns encoder options for 64x48 rgb24 frames.
func testEncodeOptions() EncodeOptions {
	return EncodeOptions{Width: 64, Height: 48, FPS: Rational{24, 1}, CRF: -1, Preset: "ultrafast"}
}

func TestEncoderErrors(t *testing.T) {
	needFFmpeg(t)
	frame := make([]byte, 64*48*3)

	t.Run("missing-dir", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "nope", "out.mp4")
		_, err := NewEncoder(testCtx(t), out, testEncodeOptions())
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("err = %v", err)
		}
		oneLine(t, err)
		assertNoOutput(t, out)
	})
	t.Run("unwritable-dir", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		if f, err := os.Create(filepath.Join(dir, "probe")); err == nil {
			f.Close()
			os.Remove(f.Name())
			t.Skip("skipping: permissions are not enforced here (running as root?)")
		}
		out := filepath.Join(dir, "out.mp4")
		_, err := NewEncoder(testCtx(t), out, testEncodeOptions())
		if err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Fatalf("err = %v", err)
		}
		assertNoOutput(t, out)
	})
	t.Run("no-extension", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out")
		if _, err := NewEncoder(testCtx(t), out, testEncodeOptions()); err == nil {
			t.Fatal("no error")
		}
		assertNoOutput(t, out)
	})
	t.Run("bogus-codec", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mp4")
		opt := testEncodeOptions()
		opt.Codec = "bogus264"
		e, err := NewEncoder(testCtx(t), out, opt)
		if err == nil {
			// An ffmpeg whose encoder list could not be read: the failure
			// must show up by Close.
			for i := 0; i < 3 && err == nil; i++ {
				err = e.Write(frame)
			}
			if err == nil {
				err = e.Close()
			}
		}
		if err == nil || !strings.Contains(err.Error(), "bogus264") {
			t.Fatalf("err = %v", err)
		}
		oneLine(t, err)
		assertNoOutput(t, out)
	})
	t.Run("container-rejects-codec", func(t *testing.T) {
		t.Parallel()
		// ffv1 cannot go into MP4: ffmpeg fails after it started.
		out := filepath.Join(t.TempDir(), "out.mp4")
		opt := testEncodeOptions()
		opt.Codec, opt.PixFmt = "ffv1", "gbrp"
		e, err := NewEncoder(testCtx(t), out, opt)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3 && err == nil; i++ {
			err = e.Write(frame)
		}
		if err == nil {
			err = e.Close()
		} else if cerr := e.Close(); cerr == nil {
			t.Error("Close after a failed Write succeeded")
		}
		if err == nil || !strings.Contains(err.Error(), "ffmpeg:") {
			t.Fatalf("err = %v, want ffmpeg's message", err)
		}
		oneLine(t, err)
		t.Log(err)
		e.Abort()
		assertNoOutput(t, out)
	})
	t.Run("odd-size", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mp4")
		opt := testEncodeOptions()
		opt.Width = 65
		_, err := NewEncoder(testCtx(t), out, opt)
		if err == nil || !strings.Contains(err.Error(), "even") || !strings.Contains(err.Error(), "yuv444p") {
			t.Fatalf("err = %v", err)
		}
		assertNoOutput(t, out)
		// yuv444p takes odd sizes.
		opt.PixFmt = "yuv444p"
		opt.ExpectFrames = 2
		e, err := NewEncoder(testCtx(t), out, opt)
		if err != nil {
			t.Fatal(err)
		}
		f := make([]byte, e.FrameSize())
		if e.Write(f) != nil || e.Write(f) != nil {
			t.Fatal("Write failed")
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		info, err := Probe(testCtx(t), out)
		if err != nil || info.Width != 65 || info.Frames != 2 {
			t.Fatalf("Probe = %+v, %v", info, err)
		}
	})
	t.Run("wrong-frame-count", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mkv")
		opt := testEncodeOptions()
		opt.ExpectFrames = 3
		e, err := NewEncoder(testCtx(t), out, opt)
		if err != nil {
			t.Fatal(err)
		}
		e.Write(frame)
		e.Write(frame)
		err = e.Close()
		if err == nil || !strings.Contains(err.Error(), "2 frames were written but 3 were expected") {
			t.Fatalf("err = %v", err)
		}
		assertNoOutput(t, out)
	})
	t.Run("wrong-frame-size", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mkv")
		e, err := NewEncoder(testCtx(t), out, testEncodeOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer e.Abort()
		if err := e.Write(frame[:100]); err == nil {
			t.Fatal("short frame accepted")
		}
	})
	t.Run("no-frames", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mkv")
		e, err := NewEncoder(testCtx(t), out, testEncodeOptions())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err == nil {
			t.Fatal("Close with no frames succeeded")
		}
		assertNoOutput(t, out)
	})
	t.Run("abort", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mkv")
		e, err := NewEncoder(testCtx(t), out, testEncodeOptions())
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if err := e.Write(frame); err != nil {
				t.Fatal(err)
			}
		}
		e.Abort()
		e.Abort()
		if e.cmd.ProcessState == nil {
			t.Error("ffmpeg not reaped by Abort")
		}
		if err := e.Close(); err == nil {
			t.Error("Close after Abort succeeded")
		}
		assertNoOutput(t, out)
	})
	t.Run("abort-after-close", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mkv")
		e, err := NewEncoder(testCtx(t), out, testEncodeOptions())
		if err != nil {
			t.Fatal(err)
		}
		e.Write(frame)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e.Abort()
		if _, err := os.Stat(out); err != nil {
			t.Fatal("Abort after Close removed the output:", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mkv")
		ctx, cancel := contextWithCancel(t)
		e, err := NewEncoder(ctx, out, testEncodeOptions())
		if err != nil {
			t.Fatal(err)
		}
		e.Write(frame)
		cancel()
		deadline := time.Now().Add(10 * time.Second)
		for err == nil && time.Now().Before(deadline) {
			err = e.Write(frame)
		}
		if err == nil {
			err = e.Close()
		}
		if !errors.Is(err, ctx.Err()) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		e.Abort()
		assertNoOutput(t, out)
	})
	t.Run("missing-audio-source", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "out.mkv")
		opt := testEncodeOptions()
		opt.StreamsFrom = filepath.Join(t.TempDir(), "gone.mkv")
		if _, err := NewEncoder(testCtx(t), out, opt); err == nil || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v", err)
		}
		assertNoOutput(t, out)
	})
}

func TestRational(t *testing.T) {
	if s := (Rational{24000, 1001}).String(); s != "24000/1001" {
		t.Errorf("String = %q", s)
	}
	if f := (Rational{30000, 1001}).Float(); f < 29.97 || f > 29.971 {
		t.Errorf("Float = %v", f)
	}
	for in, want := range map[string]Rational{
		"30000/1001": {30000, 1001}, "48/2": {24, 1}, "25": {25, 1}, "29.97": {30000, 1001},
		"23.98": {24000, 1001}, "59.94": {60000, 1001}, "12.5": {25, 2}, "24:1": {24, 1}, "119.88": {120000, 1001},
	} {
		got, err := ParseRational(in)
		if err != nil || got != want {
			t.Errorf("ParseRational(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "1/0", "a/b", "2_5", "0x19", "Inf", "NaN"} {
		if _, err := ParseRational(bad); err == nil {
			t.Errorf("ParseRational(%q) succeeded", bad)
		}
	}
}

func TestParseFFmpegInfo(t *testing.T) {
	// As printed by ffmpeg 4.1.
	dump := `Input #0, mov,mp4,m4a,3gp,3g2,mj2, from 'phone:clip.mp4':
  Metadata:
    major_brand     : isom
  Duration: 00:01:02.50, start: 0.478000, bitrate: 4000 kb/s
    Stream #0:0(und): Video: mjpeg (jpeg / 0x6765706A), yuvj420p(pc, bt470bg/unknown/unknown), 320x240, 90000 tbr, 90000 tbn, 90000 tbc (attached pic)
    Stream #0:1(und): Video: h264 (High) (avc1 / 0x31637661), yuv420p(tv, bt709), 1920x1080 [SAR 1:1 DAR 16:9], 3999 kb/s, 29.97 fps, 29.97 tbr, 30k tbn, 59.94 tbc (default)
    Metadata:
      rotate          : 90
      handler_name    : VideoHandler
    Side data:
      displaymatrix: rotation of -90.00 degrees
    Stream #0:2(eng): Audio: aac (LC) (mp4a / 0x6134706D), 48000 Hz, stereo, fltp, 128 kb/s (default)
At least one output file must be specified
`
	m, ok := parseFFmpegInfo([]byte(dump))
	if !ok {
		t.Fatal("not parsed")
	}
	if m.format != "mov,mp4,m4a,3gp,3g2,mj2" || m.duration != 62.5 || m.start != 0.478 || len(m.streams) != 3 {
		t.Fatalf("got %+v", m)
	}
	v := m.video()
	if v == nil || v.index != 1 || v.codec != "h264" || v.pixFmt != "yuv420p" || v.width != 1920 || v.height != 1080 ||
		v.fps != (Rational{30000, 1001}) || v.rotation != 270 {
		t.Errorf("video = %+v", v)
	}
	if a := m.audio(); len(a) != 1 || a[0].codec != "aac" || a[0].index != 2 {
		t.Errorf("audio = %+v", a)
	}
	if _, ok := parseFFmpegInfo([]byte("notes.txt: Invalid data found when processing input\n")); ok {
		t.Error("parsed an error message")
	}
}

func TestLogTail(t *testing.T) {
	lt := newLogTail()
	for i := 0; i < 100; i++ {
		lt.Write([]byte("[h264 @ 0x55d0aa] bad thing\r"))
	}
	lt.Write([]byte("[mp4 @ 0x1234abcd] Could not find tag for codec ffv1\nConversion failed!\n"))
	lt.Write([]byte(strings.Repeat("x", 10000)))
	if lt.Count() != 103 || len(lt.Lines()) > tailLines+1 {
		t.Errorf("Count = %d, %d lines kept", lt.Count(), len(lt.Lines()))
	}
	for _, l := range lt.Lines() {
		if len(l) > tailLineMax {
			t.Errorf("line of %d bytes kept", len(l))
		}
	}
	lt = newLogTail()
	lt.Write([]byte("[mp4 @ 0x1234abcd] Could not find tag for codec ffv1\nError initializing output stream 0:0 --\nConversion failed!\n"))
	if got := lt.Last(); got != "mp4: Could not find tag for codec ffv1" {
		t.Errorf("Last = %q", got)
	}
}

func TestFFmpegConfig(t *testing.T) {
	t.Setenv("VSR_FFMPEG", filepath.Join(t.TempDir(), "no-ffmpeg"))
	_, err := FFmpeg()
	if !errors.Is(err, ErrNoFFmpeg) || !strings.Contains(err.Error(), "VSR_FFMPEG") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Probe(testCtx(t), realClip); !errors.Is(err, ErrNoFFmpeg) {
		t.Errorf("Probe err = %v, want ErrNoFFmpeg", err)
	}
}

// TestVsyncFallback runs the ffmpeg 4.1 option set (-vsync passthrough
// instead of -fps_mode) through probe, decode and encode. It must not run in
// parallel with other tests: it swaps the cached choice.
func TestVsyncFallback(t *testing.T) {
	ff := needFFmpeg(t)
	ctx := testCtx(t)
	old := passthroughArgs(ctx, ff)
	passthroughCache.Store(ff, []string{"-vsync", "passthrough"})
	defer passthroughCache.Store(ff, old)
	t.Logf("this ffmpeg uses %v", old)

	src := clipPath(t, clips[4])
	in, out, _ := roundTrip(t, src, filepath.Join(t.TempDir(), "vsync.mp4"), EncodeOptions{CRF: 30, Preset: "ultrafast"})
	if in.Frames != 7 || out.Frames != 7 {
		t.Errorf("frames %d -> %d, want 7", in.Frames, out.Frames)
	}
}

// TestEditList checks an MP4 cut without re-encoding: its edit list hides
// the frames before the cut, so fewer frames decode than the container
// states, and that is not truncation.
func TestEditList(t *testing.T) {
	needFFmpeg(t)
	gop := fixture(t, "gop48.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=24", "-frames:v", "48",
		"-c:v", "libx264", "-g", "48", "-pix_fmt", "yuv420p")
	cut := fixture(t, "editlist.mp4", "-ss", "0.5", "-i", gop, "-c", "copy")
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), cut, tl)
		if err != nil {
			t.Fatal(err)
		}
		if info.Frames != 36 {
			t.Errorf("Frames = %d, want 36 (declared %d)", info.Frames, info.DeclaredFrames)
		}
		_, n, err := decodeAll(t, info, DecodeOptions{})
		if err != nil || n != info.Frames {
			t.Errorf("decoded %d frames: %v", n, err)
		}
	})
}

// TestToolOutputLimit: a child's stdout is read up to its limit only;
// past it the child is stopped and the result says so.
func TestToolOutputLimit(t *testing.T) {
	l := &limitBuffer{max: 10}
	if n, err := l.Write([]byte("0123456789")); n != 10 || err != nil {
		t.Fatalf("write within the limit: %d, %v", n, err)
	}
	if _, err := l.Write([]byte("x")); err != errOutputLimit || !l.over || l.buf.Len() != 10 {
		t.Fatalf("write past the limit: %v, over %v, %d bytes kept", err, l.over, l.buf.Len())
	}
	r := runToolMax(testCtx(t), 100, needFFmpeg(t), "-hide_banner", "-version") // about 1 KiB
	if !r.over || len(r.stdout) > 100 {
		t.Fatalf("ffmpeg -version with 100 bytes: over %v, %d bytes", r.over, len(r.stdout))
	}
	if r := runToolMax(testCtx(t), 1<<20, needFFmpeg(t), "-hide_banner", "-version"); r.over || r.err != nil || len(r.stdout) < 100 {
		t.Fatalf("ffmpeg -version with 1 MiB: over %v, %v, %d bytes", r.over, r.err, len(r.stdout))
	}
}

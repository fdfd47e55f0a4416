package video

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMKVWriter: ffmpeg reads the raw Matroska stream back with each
// frame's timestamp and bytes, in each pixel format it takes.
func TestMKVWriter(t *testing.T) {
	ff, err := FFmpeg()
	if err != nil {
		t.Skip(err)
	}
	for _, pix := range []string{"yuv420p", "rgb24", "rgb48le", "yuv420p10le", "yuv420p12le", "yuv420p16le", "yuv444p10le", "yuv444p12le", "yuv444p16le"} {
		var buf bytes.Buffer
		m, err := newMKVWriter(&buf, pix, 6, 4)
		if err != nil {
			t.Fatal(err)
		}
		size, _ := FrameSize(pix, 6, 4)
		stamps := []int64{0, 40000, 250000, 290000, 1000000}
		var frames []byte
		for i, us := range stamps {
			f := bytes.Repeat([]byte{byte(10 * i)}, size)
			frames = append(frames, f...)
			if err := m.WriteFrame(us, f); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(t.TempDir(), "x.mkv")
		os.WriteFile(path, buf.Bytes(), 0o644)
		out, err := exec.Command(ff, "-v", "error", "-i", path, "-c", "copy", "-f", "framecrc", "-").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", pix, err, out)
		}
		var pts []string
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Split(line, ","); len(f) == 6 && !strings.HasPrefix(line, "#") {
				pts = append(pts, strings.TrimSpace(f[2]))
			}
		}
		if got := strings.Join(pts, " "); got != "0 40000 250000 290000 1000000" || !strings.Contains(string(out), "#tb 0: 1/1000000") {
			t.Errorf("%s: ffmpeg read timestamps %q (us), want 0 40000 250000 290000 1000000\n%s", pix, got, out)
		}
		raw, err := exec.Command(ff, "-v", "error", "-i", path, "-vsync", "passthrough", "-f", "rawvideo", "-pix_fmt", pix, "-").Output()
		if err != nil || !bytes.Equal(raw, frames) {
			t.Errorf("%s: frames read back differ (%v, %d bytes of %d)", pix, err, len(raw), len(frames))
		}
	}
	if _, err := newMKVWriter(&bytes.Buffer{}, "gbrp", 2, 2); err == nil {
		t.Error("gbrp frames accepted")
	}
}

// TestNoAudio: an output with NoAudio (an image: ffmpeg 4.1's image muxer
// wrote the audio packets over the picture) takes no audio from a source
// that has some, while a video output does.
func TestNoAudio(t *testing.T) {
	src := clipPath(t, clips[1]) // with Opus audio
	for _, no := range []bool{true, false} {
		out := filepath.Join(t.TempDir(), "o.mkv")
		opt := EncodeOptions{Width: 64, Height: 48, FPS: Rational{24, 1}, CRF: -1, Preset: "ultrafast", CarryOptions: CarryOptions{StreamsFrom: src, NoAudio: no}}
		e, err := NewEncoder(testCtx(t), out, opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Write(make([]byte, 64*48*3)); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		info, err := Probe(testCtx(t), out)
		if err != nil || info.HasAudio == no {
			t.Errorf("NoAudio %v: audio %v (%v)", no, info != nil && info.HasAudio, err)
		}
	}
}

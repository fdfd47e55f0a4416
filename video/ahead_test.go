package video

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAudioAhead: the segments' join copying the audio encoded beside the
// video (StartAudio) gives the audio packets, timestamps and tags of the
// join that encodes it, for audio that starts with the video and audio
// that starts later; a failed encode leaves the join encoding it; an
// output that copies the audio needs none; Close leaves nothing behind.
func TestAudioAhead(t *testing.T) {
	probe := needFFprobe(t)
	parts := []string{
		fixture(t, "ahead_p0.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1", "-c:v", "libx264", "-pix_fmt", "yuv420p"),
		fixture(t, "ahead_p1.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1", "-vf", "hflip", "-c:v", "libx264", "-pix_fmt", "yuv420p"),
	}
	sources := map[string]string{
		"with the video": fixture(t, "ahead_src0.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=2", "-f", "lavfi", "-i", "sine=d=2",
			"-c:v", "libx264", "-c:a", "libvorbis", "-metadata:s:a:0", "language=fra", "-metadata:s:a:0", "title=Commentary"),
		"later": fixture(t, "ahead_src1.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=2", "-f", "lavfi", "-i", "sine=d=2",
			"-c:v", "libx264", "-af", "adelay=300", "-c:a", "libvorbis", "-t", "2"),
	}
	// The audio stream's packets and tags, as ffprobe lists them.
	audio := func(path string) string {
		out, err := exec.Command(probe, "-v", "error", "-select_streams", "a", "-show_entries",
			"packet=pts,dts,duration,size,flags:stream=codec_name,start_time:stream_tags=language,title", "-of", "csv", path).Output()
		if err != nil {
			t.Fatalf("ffprobe %s: %v", path, err)
		}
		return string(out)
	}
	opt := func(src string) ConcatOptions {
		return ConcatOptions{CarryOptions: CarryOptions{StreamsFrom: src}, Frames: []int{10, 10}, FPS: Rational{10, 1}}
	}
	for name, src := range sources {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			want := filepath.Join(dir, "joined.mp4")
			if _, err := Concat(testCtx(t), parts, want, opt(src)); err != nil {
				t.Fatal(err)
			}
			got := filepath.Join(dir, "ahead.mp4")
			a, err := StartAudio(testCtx(t), CarryOptions{StreamsFrom: src}, got)
			if err != nil || a == nil {
				t.Fatalf("StartAudio: %v, %v (want an encode: Vorbis into MP4)", a, err)
			}
			o := opt(src)
			o.Audio = a
			c, err := Concat(testCtx(t), parts, got, o)
			a.Close()
			a.Close()
			if err != nil {
				t.Fatal(err)
			}
			if w, g := audio(want), audio(got); w != g || !strings.Contains(g, "aac") {
				t.Errorf("audio encoded ahead:\n%s\nencoded by the join:\n%s", g, w)
			}
			if !strings.Contains(c.String(), "vorbis as aac") {
				t.Errorf("report %q", c.String())
			}
			// A failed encode: the join encodes the audio itself.
			failed := &AudioAhead{done: make(chan struct{}), err: errors.New("broken"), cancel: func() {}}
			close(failed.done)
			o.Audio = failed
			fallback := filepath.Join(dir, "fallback.mp4")
			if _, err := Concat(testCtx(t), parts, fallback, o); err != nil {
				t.Fatal(err)
			}
			if w, g := audio(want), audio(fallback); w != g {
				t.Errorf("after a failed encode ahead:\n%s\nwant:\n%s", g, w)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".") {
					t.Errorf("left behind: %s", e.Name())
				}
			}
		})
	}
	// Matroska takes Vorbis as it is: nothing to encode ahead.
	if a, err := StartAudio(testCtx(t), CarryOptions{StreamsFrom: sources["later"]}, filepath.Join(t.TempDir(), "out.mkv")); a != nil || err != nil {
		t.Errorf("StartAudio for .mkv: %v, %v (want nothing)", a, err)
	}
}

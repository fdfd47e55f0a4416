package video

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestStill(t *testing.T) {
	ff, err := FFmpeg()
	if err != nil {
		t.Skip(err)
	}
	clip := filepath.Join(t.TempDir(), "clip.mp4")
	if out, err := exec.Command(ff, "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=48x32:rate=25",
		"-frames:v", "5", "-c:v", "libx264", "-pix_fmt", "yuv420p", clip).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ctx := context.Background()
	b, err := Still(ctx, clip, 0.08, 96, 64, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != 96 || img.Bounds().Dy() != 64 {
		t.Fatalf("still: %v %v, want a 96x64 PNG", img.Bounds(), err)
	}
	if _, err := Still(ctx, clip, 5, 96, 64, 1<<20); !errors.Is(err, ErrNoFrameAt) {
		t.Errorf("past the end: %v", err)
	}
	if _, err := Still(ctx, clip, 0, 96, 64, 100); !errors.Is(err, ErrStillTooLarge) {
		t.Errorf("over the bound: %v", err)
	}
	// A playlist is refused: it could name any file.
	m3u := filepath.Join(t.TempDir(), "list.m3u8")
	os.WriteFile(m3u, []byte("#EXTM3U\n#EXTINF:1,\n"+clip+"\n#EXT-X-ENDLIST\n"), 0o644)
	if _, err := Still(ctx, m3u, 0, 96, 64, 1<<20); err == nil || errors.Is(err, ErrNoFrameAt) {
		t.Errorf("a playlist: %v, want ffmpeg's refusal", err)
	}
}

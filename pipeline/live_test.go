package pipeline

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/video"
)

// TestLiveOutputBudget: a live source that the engine restores to more
// than MaxOutputPixels is refused when its size is known, before an
// engine runs a frame or the sink is opened (issue 35: live sessions
// skipped the output budget).
func TestLiveOutputBudget(t *testing.T) {
	if _, err := video.FFmpeg(); err != nil {
		t.Skip(err)
	}
	for _, limit := range []int64{128*96 - 1, 128 * 96} { // the 2x engine makes 128x96
		out := filepath.Join(t.TempDir(), "out.ts")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := Live(ctx, LiveRequest{
			Input: video.LiveInput{URL: "-", Format: "rawvideo", Options: []string{"video_size=64x48", "pixel_format=rgb24"},
				Stdin: bytes.NewReader(make([]byte, 3*64*48*3))},
			Output: video.LiveOutput{URL: out, Encode: video.EncodeOptions{CRF: -1, Preset: "ultrafast"}},
			Open: func(w, h int) (Engine, func(), error) {
				return &fakeEngine{failAt: -1}, func() {}, nil
			},
			MaxOutputPixels: limit,
			IdleTimeout:     5 * time.Second,
		})
		_, serr := os.Stat(out)
		switch {
		case limit < 128*96 && (err == nil || !strings.Contains(err.Error(), "over the limit of 12287")):
			t.Errorf("a 64x48 source restored to 128x96, limit %d: %v", limit, err)
		case limit < 128*96 && serr == nil:
			t.Errorf("limit %d: the sink was opened", limit)
		case limit == 128*96 && (err != nil || serr != nil):
			t.Errorf("limit %d: %v, sink %v", limit, err, serr)
		}
	}
}

// TestLiveColourMatrix: a live source tagged BT.709 (its frames come as
// RGB) is restored to YCbCr converted with the BT.709 matrix, limited
// range, and tagged so; each colour comes back within 2 levels. The
// output had been tagged with the source's primaries but converted with
// an untagged BT.601 matrix, which players may take for BT.709 at HD.
func TestLiveColourMatrix(t *testing.T) {
	ffmpegOrSkip(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.mkv"), filepath.Join(dir, "out.mkv")
	runFFmpeg(t, "-f", "lavfi", "-i", "color=c=0xC83C28:s=16x8:r=5:d=0.4,format=yuv444p", "-c:v", "ffv1",
		"-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709", "-color_range", "tv", in)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Live(ctx, LiveRequest{
		Input:       video.LiveInput{URL: in, NoAudio: true},
		Output:      video.LiveOutput{URL: out, Encode: video.EncodeOptions{Codec: "ffv1"}},
		Open:        func(w, h int) (Engine, func(), error) { return &identityEngine{b: cpu.New(1)}, func() {}, nil },
		IdleTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	tags, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=color_space,color_range,color_primaries", "-of", "csv=p=0", out).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(tags)); got != "tv,bt709,bt709" {
		t.Errorf("output tagged %q (range, matrix, primaries), want tv,bt709,bt709", got)
	}
	want := runFFmpeg(t, "-i", in, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-")
	got := runFFmpeg(t, "-i", out, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-")
	if len(got) != len(want) {
		t.Fatalf("%d bytes out, %d in", len(got), len(want))
	}
	worst := 0
	for i := range want {
		worst = max(worst, int(want[i])-int(got[i]), int(got[i])-int(want[i]))
	}
	if worst > 2 {
		t.Errorf("a sample is %d levels off after a live restore that changes nothing", worst)
	}
}

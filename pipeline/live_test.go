package pipeline

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

package app_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/swiftvr"
	"github.com/vsr-dev/vsr/video"
)

// failing is a CPU backend whose convolutions fail once armed.
type failing struct {
	backend.Backend
	left atomic.Int64
}

func (f *failing) Conv2D(x backend.Tensor, w backend.Weights, p backend.ConvParams, act backend.Activation) (backend.Tensor, error) {
	if f.left.Add(-1) < 0 {
		return nil, errors.New("injected failure")
	}
	return f.Backend.Conv2D(x, w, p, act)
}

// TestRankFailure: SwiftVR on two ranks, the second failing in the middle
// of the video: the job fails with that rank's error, every rank stops,
// no output or temporary is left, and the same model then restores the
// video on both ranks.
func TestRankFailure(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if err := swiftvr.Synth(ck, "tiny", 1); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in.mkv")
	clip(t, in) // skips without ffmpeg
	if out, err := exec.Command("ffmpeg", "-y", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-frames:v", "30",
		"-c:v", "ffv1", "-pix_fmt", "gbrp", in).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	bad := &failing{Backend: cpu.New(1)}
	bad.left.Store(1 << 40)
	set := model.Values{"dit": "off", "clip-len": 8}
	ld, err := app.LoadRanks([]backend.Backend{cpu.New(1), bad}, ck, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	job := app.Job{Input: in, Output: filepath.Join(dir, "out.mkv"), Params: set, Encode: video.EncodeOptions{Codec: "ffv1", PixFmt: "gbrp"}}
	bad.left.Store(30)
	if _, err := ld.Run(context.Background(), job); err == nil || !strings.Contains(err.Error(), "injected failure") || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("a failing rank: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 2 { // ck and in.mkv
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("left behind: %v", names)
	}
	bad.left.Store(1 << 40)
	res, err := ld.Run(context.Background(), job)
	if err != nil || res.Frames != 30 {
		t.Fatalf("the next job: %+v %v", res, err)
	}
}

package app_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// TestRunImagesBatched: images of two sizes restored in batches of 2 give
// the bytes each gets restored alone, and a damaged image fails alone.
func TestRunImagesBatched(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	dir := t.TempDir()
	devs, err := app.OpenDevices("cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	params := model.Values{"scale": 2}
	ld, err := app.Load(devs[0], "", params, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	ctx := context.Background()
	enc, err := app.ImageEncode(".png", video.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !enc.NoAudio {
		t.Error("an image's encoder settings take audio")
	}
	var imgs []app.Image
	for i, size := range []string{"32x24", "20x16", "32x24", "32x24", "bad", "20x16"} {
		in := filepath.Join(dir, fmt.Sprintf("in%d.png", i))
		if size == "bad" {
			os.WriteFile(in, []byte("\x89PNG\r\n\x1a\nnot really"), 0o644)
			imgs = append(imgs, app.Image{Info: &video.Info{Path: in, Width: 32, Height: 24, Frames: 1, FPS: video.Rational{Num: 25, Den: 1}}, Output: filepath.Join(dir, "bad.png"), Encode: enc})
			continue
		}
		src := fmt.Sprintf("testsrc2=size=%s:rate=25", size)
		if out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", src, "-vf", fmt.Sprintf("hue=h=%d", 40*i), "-frames:v", "1", in).CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg: %v: %s", err, out)
		}
		info, err := video.Probe(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, app.Image{Info: info, Output: filepath.Join(dir, fmt.Sprintf("out%d.png", i)), Encode: enc})
	}
	calls := 0
	res, errs := ld.RunImages(ctx, imgs, params, 2, func(done, total int) { calls++ })
	if calls != len(imgs) {
		t.Errorf("progress called %d times for %d images", calls, len(imgs))
	}
	for i, im := range imgs {
		if i == 4 {
			if errs[i] == nil {
				t.Error("a damaged image was restored")
			}
			if _, err := os.Stat(im.Output); err == nil {
				t.Error("a damaged image left an output")
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("image %d: %v", i, errs[i])
		}
		if r := res[i]; r == nil || r.Width != 2*im.Info.Width || r.Height != 2*im.Info.Height || r.Frames != 1 || r.Seconds <= 0 || r.Output != im.Output {
			t.Errorf("image %d: result %+v", i, r)
		}
		alone := filepath.Join(dir, fmt.Sprintf("alone%d.png", i))
		if _, err := ld.Run(ctx, app.Job{Input: im.Info.Path, Output: alone, Params: params, Encode: enc}); err != nil {
			t.Fatal(err)
		}
		if a, b := frames(t, im.Output), frames(t, alone); !bytes.Equal(a, b) || len(a) != 4*im.Info.Width*im.Info.Height*3 {
			t.Errorf("image %d: batched result (%d bytes) differs from the image restored alone (%d bytes)", i, len(a), len(b))
		}
	}
}

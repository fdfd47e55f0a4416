package app_test

import (
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// TestAlphaUpscalerMeasure measures the two ways of upscaling an image's
// alpha plane that the Real-ESRGAN tools use, on a real picture with real
// alphas: a frame of testdata/video/oa4_launch.webm (640x360) with a soft
// radial gradient and with a shape keyed from the picture's own luma. Each
// alpha is downscaled by 4 (area) and upscaled by 4 again: by bicubic
// (realesrgan-ncnn-vulkan's choice, vsr's) and through the bundled model
// as a gray RGB picture (inference_realesrgan.py --alpha_upsampler
// realesrgan). It logs the PSNR of each against the original alpha (the
// figures in docs/CLI.md's image section) and fails if bicubic, the method
// vsr uses, falls more than 0.5 dB behind the model on either alpha.
func TestAlphaUpscalerMeasure(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	if testing.Short() {
		t.Skip("runs the model at 160x90 on the CPU")
	}
	dir := t.TempDir()
	src := filepath.Join("..", "testdata", "video", "oa4_launch.webm")
	const w, h = 640, 360
	alphas := map[string]string{
		"radial gradient": "format=gray,geq=lum='255*clip(1.6-1.6*hypot(X-W/2,Y-H/2)/hypot(W/2,H/2),0,1)'",
		"luma key":        "format=gray,lutyuv=y='clip((val-70)*8,0,255)'",
		"soft luma key":   "format=gray,lutyuv=y='clip((val-70)*8,0,255)',gblur=sigma=3",
	}
	devs, err := app.OpenDevices("cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	params := model.Values{"scale": 4}
	ld, err := app.Load(devs[0], "", params, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	enc, err := app.ImageEncode(".png", video.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, vf := range alphas {
		ffmpeg := func(args ...string) []byte {
			t.Helper()
			out, err := exec.Command("ffmpeg", append([]string{"-v", "error", "-y"}, args...)...).Output()
			if err != nil {
				t.Fatalf("ffmpeg %v: %v", args, err)
			}
			return out
		}
		orig := ffmpeg("-ss", "2", "-i", src, "-frames:v", "1", "-vf", vf, "-f", "rawvideo", "-pix_fmt", "gray", "-")
		small := filepath.Join(dir, "small.png") // the alpha at a quarter, as gray RGB
		ffmpeg("-ss", "2", "-i", src, "-frames:v", "1", "-vf", vf+",scale=160:90:flags=area,format=rgb24", small)
		bicubic := ffmpeg("-i", small, "-vf", "scale=640:360:flags=bicubic", "-f", "rawvideo", "-pix_fmt", "gray", "-")
		up := filepath.Join(dir, "model.png")
		if _, err := ld.Run(context.Background(), app.Job{Input: small, Output: up, Params: params, Encode: enc}); err != nil {
			t.Fatal(err)
		}
		rgb := frames(t, up)
		byModel := make([]byte, w*h)
		for i := range byModel { // the mean of R, G, B
			byModel[i] = byte((int(rgb[3*i]) + int(rgb[3*i+1]) + int(rgb[3*i+2]) + 1) / 3)
		}
		pb, pm := psnr(orig, bicubic), psnr(orig, byModel)
		t.Logf("%s: bicubic %.2f dB, model %.2f dB", name, pb, pm)
		if pb < pm-0.5 {
			t.Errorf("%s: bicubic (%.2f dB) is behind the model (%.2f dB): reconsider the choice", name, pb, pm)
		}
	}
}

// psnr is the peak signal-to-noise ratio of b against a (8-bit), in dB.
func psnr(a, b []byte) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return math.Inf(-1)
	}
	var se float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255*float64(len(a))/se)
}

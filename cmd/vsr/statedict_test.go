package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
	"github.com/vsr-dev/vsr/serve"
)

// TestStateDictCommands: vsr models FILE says what a state dict is and
// the graph vsr runs; --param prints the graph; convert writes it with
// its architecture in the metadata; restore and bench run it; a SwinIR
// is named and refused.
func TestStateDictCommands(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	b := archtest.New(1).ESRGAN(archtest.RRDB{Features: 8, Growth: 4, Blocks: 2, In: 12, Out: 3, Ups: 2})
	path := filepath.Join(dir, "x2.safetensors")
	if err := arch.Write(path, b.D, nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VSR_MODELS", dir)
	if out, err := vsr(t, "models"); err != nil || !strings.Contains(out, "x2.safetensors") || !strings.Contains(out, "ESRGAN (Real-ESRGAN keys) state dict in the models folder; vsr runs it") {
		t.Errorf("vsr models: %v\n%s", err, out)
	}
	out, err := vsr(t, "models", path)
	for _, want := range []string{"ESRGAN (Real-ESRGAN keys)", "scale         x2", "pixel unshuffle by 2", "Concat", "vsr runs it"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("vsr models %s: %v, want %q in\n%s", path, err, want, out)
		}
	}
	if out, err := vsr(t, "models", path, "--param"); err != nil || !strings.HasPrefix(out, "7767517\n") || !strings.Contains(out, "pixel_unshuffle") {
		t.Errorf("--param: %v\n%s", err, out)
	}
	conv := filepath.Join(dir, "conv.safetensors")
	if out, err := vsr(t, "models", "convert", path, conv); err != nil || !strings.Contains(out, "ESRGAN (Real-ESRGAN keys) x2") {
		t.Errorf("convert: %v\n%s", err, out)
	}
	f, err := safetensors.Open(conv)
	if err != nil {
		t.Fatal(err)
	}
	if m := f.Metadata(); m["architecture"] != "ESRGAN" || m["scale"] != "2" {
		t.Errorf("converted metadata %v", m)
	}
	f.Close()
	if _, err := vsr(t, "models", "convert", path, path); err == nil {
		t.Error("convert overwrote its input")
	}
	in := genClip(t, dir, 2, false, "mp4")
	if _, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "a.mp4"), "--model", path, "--device", "cpu", "--progress", "none"); err != nil {
		t.Errorf("restore: %v", err)
	}
	if js, err := vsr(t, "bench", in, "--model", path, "--device", "cpu", "--frames", "2", "--requests", "1", "--no-encode", "--json"); err != nil || !strings.Contains(js, "x2") {
		t.Errorf("bench: %v\n%s", err, js)
	}
	swin := filepath.Join(dir, "swinir.safetensors")
	keys := archtest.New(1).Keys("conv_first.weight", "layers.0.residual_group.blocks.0.norm1.weight", "layers.0.residual_group.blocks.0.mlp.fc1.bias", "layers.0.residual_group.blocks.0.attn.relative_position_index")
	if err := arch.Write(swin, keys.D, nil); err != nil {
		t.Fatal(err)
	}
	if out, err := vsr(t, "models", swin); err != nil || !strings.Contains(out, "a SwinIR model (transformer): vsr does not run this architecture yet") {
		t.Errorf("vsr models swinir: %v\n%s", err, out)
	}
	if _, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "b.mp4"), "--model", swin, "--device", "cpu", "--progress", "none"); err == nil || !strings.Contains(err.Error(), "a SwinIR model (transformer): vsr does not run this architecture yet") {
		t.Errorf("restore with a SwinIR: %v", err)
	}
}

// TestPthCommands: PyTorch .pth files (testdata/pth, written by
// torch.save) in restore, in the models folder, in vsr models and
// convert; one of no known architecture and one whose pickle names
// posix.system are refused in one line.
func TestPthCommands(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	pth := func(name string) string { return filepath.Join("..", "..", "testdata", "pth", name) }
	in := genClip(t, dir, 2, false, "mp4")
	for _, m := range []string{"esrgan_new_x4.pth", "esrgan_old_x4.legacy.pth"} {
		out := filepath.Join(dir, m+".mp4")
		if _, err := vsr(t, "restore", in, "-o", out, "--model", pth(m), "--device", "cpu", "--progress", "none"); err != nil {
			t.Fatalf("restore --model %s: %v", m, err)
		}
		if info := probe(t, out); info.Width != 96 || info.Height != 64 || info.Frames != 2 {
			t.Errorf("restore --model %s: %dx%d, %d frames; want 96x64, 2", m, info.Width, info.Height, info.Frames)
		}
	}
	out, err := vsr(t, "models", pth("esrgan_new_x4.pth"))
	for _, want := range []string{"ESRGAN (Real-ESRGAN keys)", "scale         x4", "blocks        2", "vsr runs it"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("vsr models esrgan_new_x4.pth: %v, want %q in\n%s", err, want, out)
		}
	}
	b, err := os.ReadFile(pth("compact_prelu_x4.pth"))
	if err != nil {
		t.Fatal(err)
	}
	models := filepath.Join(dir, "models")
	os.Mkdir(models, 0o755)
	os.WriteFile(filepath.Join(models, "animevideo.pth"), b, 0o644)
	t.Setenv("VSR_MODELS", models)
	if out, err := vsr(t, "models"); err != nil || !strings.Contains(out, "animevideo.pth") || !strings.Contains(out, "SRVGGNetCompact state dict in the models folder; vsr runs it") {
		t.Errorf("vsr models with a .pth in the folder: %v\n%s", err, out)
	}
	conv := filepath.Join(dir, "cugan.safetensors")
	if out, err := vsr(t, "models", "convert", pth("cugan_2x_pro.pth"), conv); err != nil || !strings.Contains(out, "RealCUGAN (pro) x2") || !strings.Contains(out, "left out 1 entry that is no float tensor: pro (a int, not a tensor)") {
		t.Errorf("convert: %v\n%s", err, out)
	}
	if f, err := safetensors.Open(conv); err != nil {
		t.Error(err)
	} else {
		if m := f.Metadata(); m["architecture"] != "RealCUGAN" || m["architecture_variant"] != "pro" || m["scale"] != "2" {
			t.Errorf("converted metadata %v", m)
		}
		f.Close()
	}
	// Real-CUGAN: the converted file keeps "pro" in its metadata and
	// restores the same frames; RealPLKSR runs; a frame smaller than
	// Real-CUGAN's reflection pad is refused in one line.
	big := filepath.Join(dir, "big.mkv")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x26:rate=25", "-frames:v", "2", "-c:v", "ffv1", big)
	var sums []string
	for _, m := range []string{pth("cugan_2x_pro.pth"), conv, pth("realplksr_x4.pth")} {
		out := filepath.Join(dir, filepath.Base(m)+".mkv")
		if _, err := vsr(t, "restore", big, "-o", out, "--model", m, "--device", "cpu", "--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none"); err != nil {
			t.Fatalf("restore --model %s: %v", m, err)
		}
		sums = append(sums, framemd5(t, out))
	}
	if sums[0] != sums[1] {
		t.Error("the converted Real-CUGAN pro restores other frames than its .pth")
	}
	if info := probe(t, filepath.Join(dir, "realplksr_x4.pth.mkv")); info.Width != 160 || info.Height != 104 {
		t.Errorf("RealPLKSR x4: %dx%d, want 160x104", info.Width, info.Height)
	}
	for m, want := range map[string]string{
		"cugan_2x.pth":             "a 24x16 input is too small for this model: its reflection padding needs more than 18x18 pixels",
		"handmade-zip.pth":         "a state dict of no architecture vsr knows (keys conv.weight, conv.bias, half.weight, bf.weight, ... (8 keys)); vsr runs ESRGAN, SRVGGNetCompact, SPAN, Real-CUGAN and RealPLKSR state dicts",
		"handmade-evil-system.pth": "refusing posix.system",
	} {
		_, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "x.mp4"), "--model", pth(m), "--device", "cpu", "--progress", "none")
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("restore --model %s: %v, want one line with %q", m, err, want)
		}
	}
}

// TestServePth: vsr serve with .pth models (a Real-CUGAN pro and a
// RealPLKSR) lists them in its metadata with their architectures, and a
// task naming each gives the frames vsr restore gives.
func TestServePth(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	data, in, out := serveRoots(dir)
	sizedClip(t, filepath.Join(in, "c.mp4"), 40, 26, 2)
	models := []string{filepath.Join("..", "..", "testdata", "pth", "cugan_2x_pro.pth"), filepath.Join("..", "..", "testdata", "pth", "realplksr_x2_ln.pth")}
	srv := startServe(t, bin, data, "--model", models[0], "--model", models[1])
	defer srv.stop()
	a := api{t, srv.url}
	code, meta := a.call("GET", "/v1/service/metadata", nil)
	js, _ := json.Marshal(meta)
	if code != 200 || !strings.Contains(string(js), `"architecture":"RealCUGAN (pro)","family":"compact","name":"cugan_2x_pro"`) || !strings.Contains(string(js), `"architecture":"RealPLKSR","family":"compact","name":"realplksr_x2_ln"`) {
		t.Fatalf("metadata %d %s", code, js)
	}
	for i, m := range models {
		name := fmt.Sprintf("m%d.mkv", i)
		id := a.submit(map[string]any{"video_path": "c.mp4", "save_result_path": name, "model": strings.TrimSuffix(filepath.Base(m), ".pth"), "codec": "ffv1", "pix_fmt": "gbrp"})
		a.wait(id, serve.Completed, 120*time.Second)
		ref := filepath.Join(dir, name)
		if _, err := vsr(t, "restore", filepath.Join(in, "c.mp4"), "-o", ref, "--model", m, "--device", "cpu", "--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none"); err != nil {
			t.Fatal(err)
		}
		if framemd5(t, filepath.Join(out, name)) != framemd5(t, ref) {
			t.Errorf("the service's %s differs from vsr restore's", filepath.Base(m))
		}
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
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

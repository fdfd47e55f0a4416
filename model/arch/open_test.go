package arch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
)

// TestOpenFloats reads float32, float16 and bfloat16 tensors of a
// .safetensors file, whole and header only.
func TestOpenFloats(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	v := []float32{1, -2.5, 0.125, 65504}
	err := safetensors.Write(path, []safetensors.WriteTensor{
		{Name: "a", DType: safetensors.F32, Shape: []int{4}, Data: safetensors.Float32Bytes(v)},
		{Name: "b", DType: safetensors.F16, Shape: []int{2, 2}, Data: safetensors.Float32ToF16(v)},
		{Name: "c", DType: safetensors.BF16, Shape: []int{4}, Data: safetensors.Float32ToBF16([]float32{1, -2.5, 0.125, 65536})},
	}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := arch.Open(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Metadata["k"] != "v" || len(d.Keys) != 3 {
		t.Fatalf("metadata %v, keys %v", d.Metadata, d.Keys)
	}
	for k, want := range map[string][]float32{"a": v, "b": v, "c": {1, -2.5, 0.125, 65536}} {
		got, err := arch.Floats(d.Get(k))
		if err != nil {
			t.Fatal(k, err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s[%d] = %g, want %g", k, i, got[i], want[i])
			}
		}
	}
	h, err := arch.Open(path, true)
	if err != nil || h.Get("b").Data != nil || len(h.Shape("b")) != 2 {
		t.Errorf("header only: %v %+v", err, h.Get("b"))
	}
}

// TestOpenPth reads a torch.save file (a Real-ESRGAN x4 with random
// weights under "params_ema") whole and header only, detects it, reads
// its header once while the file stays the same and again once it
// changes, and says of a bare pickle that it is no torch.save file.
func TestOpenPth(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "pth", "esrgan_new_x4.pth"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.pth")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := arch.Open(path, false)
	if err != nil || len(d.Keys) != 72 || d.Get("conv_first.weight").Data == nil {
		t.Fatalf("whole: %v", err)
	}
	var reads int
	defer arch.CountHeaderReads(&reads)()
	for range 2 {
		info, h, ok := arch.Sniff(path)
		if !ok || info.Arch != "ESRGAN" || info.Scale != 4 || h.Get("conv_first.weight").Data != nil || len(h.Keys) != 72 {
			t.Fatalf("sniff: %v %+v", ok, info)
		}
	}
	if reads != 1 {
		t.Errorf("two sniffs of one file read it %d times, want 1", reads)
	}
	if err := os.Chtimes(path, time.Time{}, time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := arch.Sniff(path); !ok || reads != 2 {
		t.Errorf("after the file changed: %v, %d reads, want 2", ok, reads)
	}
	bad := filepath.Join(dir, "n.pth")
	os.WriteFile(bad, []byte("\x80\x02}q\x00."), 0o644)
	if _, err := arch.Open(bad, true); err == nil || !strings.Contains(err.Error(), "not a torch.save file") || !strings.Contains(err.Error(), bad) {
		t.Errorf("a pickle without torch's magic number: %v", err)
	}
}

// TestSniffRealCUGANName reads a Real-CUGAN's variant, which its weights
// cannot tell, from the file's name.
func TestSniffRealCUGANName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "up2x-latest-denoise3x.safetensors")
	if err := arch.Write(path, archtest.New(1).RealCUGAN(2, false, true).D, nil); err != nil {
		t.Fatal(err)
	}
	info, _, ok := arch.Sniff(path)
	if !ok || info.Title() != "RealCUGAN (pro, denoise3x)" || info.Scale != 2 {
		t.Errorf("%v %+v", ok, info)
	}
}

// TestProMarker finds a Real-CUGAN pro model whose "pro" entry is an int
// (no tensor, so not in the Dict's Keys), and again in the .safetensors
// file Write makes of it, which cannot hold the int.
func TestProMarker(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "pth", "cugan_2x_pro.pth")
	d, err := arch.Open(path, false)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.Detect(d)
	if err != nil || info.Variant != "pro" || d.Get("pro") != nil {
		t.Fatalf("%v, variant %q, pro tensor %v: want pro from a non-tensor entry", err, info.Variant, d.Get("pro"))
	}
	out := filepath.Join(t.TempDir(), "c.safetensors")
	if err := arch.Write(out, d, info); err != nil {
		t.Fatal(err)
	}
	if got, _, ok := arch.Sniff(out); !ok || got.Variant != "pro" {
		t.Errorf("converted: %v %+v, want pro", ok, got)
	}
}

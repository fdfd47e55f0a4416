package arch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
)

// TestOpenFloats reads float32, float16 and bfloat16 tensors of a
// .safetensors file, whole and header only, and refuses a pickle with
// what to do.
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
	pth := filepath.Join(dir, "m.pth")
	os.WriteFile(pth, []byte("\x80\x02}q\x00."), 0o644)
	if _, err := arch.Open(pth, false); err == nil || !strings.Contains(err.Error(), "convert it to .safetensors") {
		t.Errorf("a pickle: %v", err)
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

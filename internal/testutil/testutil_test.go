package testutil

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestRelErr(t *testing.T) {
	if e := RelErr([]float32{1, 2}, []float32{1, 2}); e != 0 {
		t.Errorf("equal slices: %g, want 0", e)
	}
	if e := RelErr([]float64{3, 4}, []float64{0, 0}); !math.IsInf(e, 1) {
		t.Errorf("against zeros: %g, want +Inf", e)
	}
	if e := RelErr([]float64{1}, []float64{1, 2}); !math.IsInf(e, 1) {
		t.Errorf("different lengths: %g, want +Inf", e)
	}
	if e := RelErr([]float64{3, 4}, []float64{0, 5}); math.Abs(e-math.Sqrt(10)/5) > 1e-15 {
		t.Errorf("RelErr = %g, want sqrt(10)/5", e)
	}
}

func TestReadF32(t *testing.T) {
	p := filepath.Join(t.TempDir(), "v.f32")
	// 1.0 and -2.5 as little-endian float32.
	if err := os.WriteFile(p, []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0}, 0o644); err != nil {
		t.Fatal(err)
	}
	if v := ReadF32(t, p); len(v) != 2 || v[0] != 1 || v[1] != -2.5 {
		t.Errorf("ReadF32 = %v, want [1 -2.5]", v)
	}
}

func TestRequireGPU(t *testing.T) {
	RequireGPU(t) // skips here without a GPU; passes on a GPU host
}

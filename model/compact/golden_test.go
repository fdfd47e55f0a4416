package compact

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/backend/cpu"
)

// TestGolden compares the bundled model on the CPU backend with outputs of
// an independent PyTorch implementation (see testdata/compact/README.md).
func TestGolden(t *testing.T) {
	b := cpu.New(0)
	fixtures := []struct {
		frame, w, h int
	}{{0, 48, 32}, {100, 40, 24}, {150, 33, 21}}
	for _, scale := range []int{2, 3, 4} {
		m, err := LoadBundled(b, scale)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fixtures {
			base := filepath.Join("..", "..", "testdata", "compact", fmt.Sprintf("frame%d_%dx%d", f.frame, f.w, f.h))
			rgb, err := os.ReadFile(base + ".rgb")
			if err != nil {
				t.Fatal(err)
			}
			want := readF32(t, fmt.Sprintf("%s.x%d.f32", base, scale))
			x, err := b.FromRGB8(rgb, 1, f.h, f.w)
			if err != nil {
				t.Fatal(err)
			}
			y, err := m.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := b.Download(y)
			if s := y.Shape(); s.W != f.w*scale || s.H != f.h*scale || s.C != 3 {
				t.Fatalf("x%d %s: shape %v", scale, base, s)
			}
			if e := relErr(got, want); e > 1e-4 || math.IsNaN(e) {
				t.Errorf("x%d %s: relative error %.3g, want < 1e-4", scale, filepath.Base(base), e)
			} else {
				t.Logf("x%d %s: relative error %.3g", scale, filepath.Base(base), e)
			}
			x.Free()
			y.Free()
		}
		m.Close()
	}
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	d, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(d)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
	}
	return out
}

func relErr(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

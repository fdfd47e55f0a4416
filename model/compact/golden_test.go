package compact

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/internal/testutil"
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

var (
	readF32 = testutil.ReadF32
	relErr  = testutil.RelErr[float32]
)

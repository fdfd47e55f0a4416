package compact

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend/cpu"
)

func randFrames(n, w, h int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n*w*h*3)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

// TestTiledEqualsWhole runs the bundled x2, x3 and x4 graphs on a frame
// whole and in small tiles, and requires bitwise-identical output.
func TestTiledEqualsWhole(t *testing.T) {
	b := cpu.New(0)
	for _, scale := range []int{2, 3, 4} {
		m, err := LoadBundled(b, scale)
		if err != nil {
			t.Fatal(err)
		}
		w, h, n := 45, 27, 2
		in := randFrames(n, w, h, uint64(scale))
		ow, oh := m.OutputSize(w, h)
		if ow != w*scale || oh != h*scale {
			t.Fatalf("x%d: output %dx%d", scale, ow, oh)
		}
		whole := make([]byte, n*ow*oh*3)
		if err := m.Upscale(context.Background(), in, n, w, h, whole, 0); err != nil {
			t.Fatal(err)
		}
		for _, tile := range []int{16, 23} {
			tiled := make([]byte, len(whole))
			if err := m.Upscale(context.Background(), in, n, w, h, tiled, tile); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(whole, tiled) {
				t.Errorf("x%d tile %d: tiled output differs from whole", scale, tile)
			}
		}
		m.Close()
	}
}

// TestFusedEqualsUnfused checks the fused shuffle-add path against the
// separate ops, bitwise, whole and tiled.
func TestFusedEqualsUnfused(t *testing.T) {
	b := cpu.New(0)
	for _, scale := range []int{2, 4} {
		m, err := LoadBundled(b, scale)
		if err != nil {
			t.Fatal(err)
		}
		u := loadUnfused(t, b, scale)
		if len(m.ops) >= len(u.ops) {
			t.Fatalf("x%d: fusion did not shorten the graph (%d vs %d ops)", scale, len(m.ops), len(u.ops))
		}
		w, h := 30, 18
		in := randFrames(1, w, h, 9)
		ow, oh := m.OutputSize(w, h)
		if uw, uh := u.OutputSize(w, h); uw != ow || uh != oh {
			t.Fatalf("x%d: fused output %dx%d, unfused %dx%d", scale, ow, oh, uw, uh)
		}
		a, c := make([]byte, ow*oh*3), make([]byte, ow*oh*3)
		if err := m.Upscale(context.Background(), in, 1, w, h, a, 8); err != nil {
			t.Fatal(err)
		}
		if err := u.Upscale(context.Background(), in, 1, w, h, c, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, c) {
			t.Errorf("x%d: fused tiled output differs from unfused whole", scale)
		}
	}
}

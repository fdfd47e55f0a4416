package swiftvr

import (
	"math"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/internal/testutil"
)

var readF32 = testutil.ReadF32

// TestReAEGolden compares the ReAE on the CPU with an independent PyTorch
// implementation (scripts/golden_reae.py, testdata/reae/README.md), in one
// pass and in two chunks, for both TemporalGrow orders.
func TestReAEGolden(t *testing.T) {
	f, err := safetensors.Open("../../testdata/reae/reae_tiny.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := cpu.New(0)
	r, err := NewReAE(b, FileSource{f})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := readF32(t, "../../testdata/reae/reae_in.f32")
	wantZ := readF32(t, "../../testdata/reae/reae_latent.f32")
	wantY := readF32(t, "../../testdata/reae/reae_out.f32")
	x, _ := b.Upload(backend.Shape{N: 8, H: 32, W: 48, C: 3}, in)
	for _, before := range []bool{false, true} {
		for _, chunks := range [][]int{{8}, {4, 4}} {
			r.TGrowBefore = before
			z, y := chunked(t, r, b, x, chunks)
			zs, _ := b.Download(z)
			ys, _ := b.Download(y)
			ez, ey := rel(zs, wantZ), rel(ys, wantY)
			if ez > 1e-4 || ey > 1e-4 || math.IsNaN(ez+ey) {
				t.Errorf("tgrow before=%v chunks %v: relative error latent %.3g, output %.3g; want < 1e-4", before, chunks, ez, ey)
			} else {
				t.Logf("tgrow before=%v chunks %v: relative error latent %.3g, output %.3g", before, chunks, ez, ey)
			}
		}
	}
}

// goldenCase runs the ReAE of a fixture checkpoint on b over the fixture's
// 8 input frames (two chunks of 4) and returns the latents and outputs.
func goldenCase(t *testing.T, b backend.Backend, weights, prefix string) (z, y, wantZ, wantY []float32) {
	t.Helper()
	f, err := safetensors.Open("../../testdata/reae/" + weights)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewReAE(b, FileSource{f})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := readF32(t, "../../testdata/reae/"+prefix+"_in.f32")
	x, err := b.Upload(backend.Shape{N: 8, H: 32, W: 48, C: 3}, in)
	if err != nil {
		t.Fatal(err)
	}
	zt, yt := chunked(t, r, b, x, []int{4, 4})
	z, _ = b.Download(zt)
	y, _ = b.Download(yt)
	return z, y, readF32(t, "../../testdata/reae/"+prefix+"_latent.f32"), readF32(t, "../../testdata/reae/"+prefix+"_out.f32")
}

// TestReAESynthGolden checks the ReAE of the tiny synthetic checkpoint
// (`vsr checkpoint synth --preset tiny`, seed 1) against the independent
// PyTorch implementation.
func TestReAESynthGolden(t *testing.T) {
	z, y, wz, wy := goldenCase(t, cpu.New(0), "synth_tiny_reae.safetensors", "reae_synth")
	ez, ey := rel(z, wz), rel(y, wy)
	if ez > 1e-4 || ey > 1e-4 || math.IsNaN(ez+ey) {
		t.Errorf("relative error latent %.3g, output %.3g; want < 1e-4", ez, ey)
	}
	t.Logf("relative error latent %.3g, output %.3g", ez, ey)
}

package swiftvr

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// tinyDiT loads the DiT of a tiny synthetic checkpoint.
func tinyDiT(t *testing.T) (*DiT, Dims) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ck")
	if err := Synth(dir, "tiny", 1); err != nil {
		t.Fatal(err)
	}
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	prompt, err := ck.PromptEmbedding()
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDiT(FileSource{ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt)
	if err != nil {
		t.Fatal(err)
	}
	return d, ck.Dims
}

func randLatents(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 5))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// TestDiTProperties runs the tiny DiT on a latent grid large enough for
// shifted windows (20x36 tokens: two and three windows per axis) and checks
// what must hold whatever the weights: the output has the input's shape,
// is finite and not trivial, is deterministic, and the global temporal
// offset changes it only by rounding (RoPE is relative and every window
// spans the whole chunk in time).
func TestDiTProperties(t *testing.T) {
	d, dims := tinyDiT(t)
	const f, h, w = 2, 40, 72 // latent grid; tokens 20 x 36
	x := randLatents(f*h*w*dims.InChannels, 1)
	v0, err := d.Forward(x, f, h, w, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(v0) != len(x) {
		t.Fatalf("output %d values, input %d", len(v0), len(x))
	}
	var sq float64
	for _, v := range v0 {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite output")
		}
		sq += float64(v) * float64(v)
	}
	rms := math.Sqrt(sq / float64(len(v0)))
	if rms < 1e-3 || rms > 1e3 {
		t.Errorf("output RMS %g", rms)
	}
	again, _ := d.Forward(x, f, h, w, 0)
	for i := range again {
		if again[i] != v0[i] {
			t.Fatal("not deterministic")
		}
	}
	shifted, _ := d.Forward(x, f, h, w, 37)
	var num float64
	for i := range shifted {
		e := float64(shifted[i]) - float64(v0[i])
		num += e * e
	}
	if rel := math.Sqrt(num / sq); rel > 1e-4 {
		t.Errorf("temporal offset 37 changed the output by %.3g (relative)", rel)
	} else {
		t.Logf("temporal offset changes the output by %.3g (rounding)", rel)
	}
	if _, err := d.Forward(x[:10], f, h, w, 0); err == nil {
		t.Error("wrong latent size accepted")
	}
}

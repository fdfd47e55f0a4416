// Package testutil holds the helpers that the packages' tests share: skipping
// a test where there is no NVIDIA GPU, reading golden files written by the
// PyTorch reference implementations (scripts/golden_*.py), and comparing
// results by relative error. It is imported by test files only.
//
// Packages that the helpers themselves import (nvidia/cuda, nvidia/dl) keep
// their own checks, to avoid an import cycle in their internal tests.
package testutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"

	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// RequireGPU skips t unless the CUDA driver loads and sees at least one
// NVIDIA GPU (NoGPU's reason is the skip message). It does not open a
// device: callers open their backend after it.
func RequireGPU(t testing.TB) {
	t.Helper()
	if err := NoGPU(); err != nil {
		t.Skip(err)
	}
}

// NoGPU says why GPU tests cannot run here ("no CUDA driver: ...", "no
// NVIDIA GPU"), or returns nil where the CUDA driver loads and sees a GPU.
// Set-ups shared by several tests (a sync.Once) keep its reason to skip each.
func NoGPU() error {
	if err := cu.Init(); err != nil {
		return fmt.Errorf("no CUDA driver: %w", err)
	}
	if n, err := cu.DeviceCount(); err != nil || n == 0 {
		return errors.New("no NVIDIA GPU")
	}
	return nil
}

// ReadF32 reads a golden file of little-endian float32 values (the raw
// .f32 files of testdata/, as numpy's tofile writes them); a file that
// cannot be read fails t.
func ReadF32(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// RelErr returns ||got - want|| / ||want|| (Euclidean norms, computed in
// float64): 0 for equal slices and +Inf for slices of different lengths.
// Where want is all zeros it is NaN if got is too (0/0), else +Inf.
func RelErr[T float32 | float64](got, want []T) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

package testutil

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/tensor/npy"
)

// PthDir is testdata/pth, the golden fixtures of PyTorch state dicts (its
// README.md says how they were made), from a package two folders below
// the module's root (model/compact, backend/cuda).
var PthDir = filepath.Join("..", "..", "testdata", "pth")

// PthTolerance is the bound for the CPU in float32, the
// manifest's tolerance.cpu_f32_rel: ||out-ref|| / ||ref||.
const PthTolerance = 1e-5

// PthCase is one case of testdata/pth/manifest.json: the fields the tests
// read.
type PthCase struct {
	Name  string `json:"name"`
	Arch  string `json:"arch"`
	Scale int    `json:"scale"`
	Files []struct {
		Path   string `json:"path"`
		Format string `json:"format"`
	} `json:"files"`
	Input       string         `json:"input"`
	InputShape  []int          `json:"input_shape"`
	Output      string         `json:"output"`
	OutputShape []int          `json:"output_shape"`
	Detect      map[string]any `json:"detect"`
	TensorElems int64          `json:"tensor_elems"`
}

// PthCases reads the manifest's cases; a manifest that cannot be read, or
// whose tolerance is not PthTolerance, fails t.
func PthCases(t testing.TB) []PthCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(PthDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Tolerance struct {
			CPUF32Rel float64 `json:"cpu_f32_rel"`
		} `json:"tolerance"`
		Cases []PthCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Tolerance.CPUF32Rel != PthTolerance || len(m.Cases) == 0 {
		t.Fatalf("manifest: tolerance %g, %d cases; want %g and some", m.Tolerance.CPUF32Rel, len(m.Cases), PthTolerance)
	}
	return m.Cases
}

// Arrays reads the case's input and reference output, reordered from
// PyTorch's (1, c, h, w) to vsr's (1, h, w, c).
func (c PthCase) Arrays(t testing.TB) (in, ref []float32) {
	t.Helper()
	read := func(name string, shape []int) []float32 {
		v, err := npy.Read(filepath.Join(PthDir, name), shape)
		if err != nil {
			t.Fatal(err)
		}
		ch, h, w := shape[1], shape[2], shape[3]
		out := make([]float32, len(v))
		for k := range ch {
			for i := range h * w {
				out[i*ch+k] = v[k*h*w+i]
			}
		}
		return out
	}
	return read(c.Input, c.InputShape), read(c.Output, c.OutputShape)
}

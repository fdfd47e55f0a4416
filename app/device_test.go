package app

import (
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// fakeGPU is a CPU backend that says it is a GPU of a given model.
type fakeGPU struct {
	*cpu.Backend
	name, dtype string
}

func (g fakeGPU) Name() string              { return "cuda:9" }
func (g fakeGPU) UUID() (string, error)     { return "GPU-x", nil }
func (g fakeGPU) DeviceName() string        { return g.name }
func (g fakeGPU) StorageType() string       { return g.dtype }
func (g fakeGPU) PeakBytes() int64          { return 0 }
func (g fakeGPU) ResetPeak()                {}
func (g fakeGPU) Spans() []backend.Span     { return nil }
func (g fakeGPU) Available() (int64, error) { return 1 << 40, nil }
func (g fakeGPU) Close() error              { return nil }

// TestSameKind: ranks of one kind pass; a CPU beside a GPU, two GPU models
// or two storage types are refused, naming both.
func TestSameKind(t *testing.T) {
	h200 := fakeGPU{cpu.New(1), "NVIDIA H200", "bf16"}
	ok := [][]backend.Backend{{cpu.New(1), cpu.New(1)}, {h200, h200}}
	for _, devs := range ok {
		if err := sameKind(devs); err != nil {
			t.Errorf("%v", err)
		}
	}
	bad := map[string][]backend.Backend{
		"cpu (CPU) and cuda:9 (NVIDIA H200 (bf16))":                  {cpu.New(1), h200},
		"(NVIDIA H200 (bf16)) and cuda:9 (NVIDIA A100 (bf16))":       {h200, fakeGPU{cpu.New(1), "NVIDIA A100", "bf16"}},
		"cuda:9 (NVIDIA H200 (bf16)) and cuda:9 (NVIDIA H200 (f16))": {h200, fakeGPU{cpu.New(1), "NVIDIA H200", "f16"}},
	}
	for want, devs := range bad {
		if err := sameKind(devs); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want %q", err, want)
		}
	}
}

package swiftvr

import (
	"fmt"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

// tensorFile is what a safetensors File or Set offers.
type tensorFile interface {
	Info(name string) (*safetensors.TensorInfo, bool)
	Float32(name string) ([]float32, error)
}

// FileSource reads weights from a safetensors File or Set.
type FileSource struct{ F tensorFile }

// Tensor returns a tensor's shape and values as float32; an fp8 weight
// is dequantized with its scale (NAME_scale, one per output channel).
func (s FileSource) Tensor(name string) ([]int, []float32, error) {
	info, ok := s.F.Info(name)
	if !ok {
		return nil, nil, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	v, err := s.F.Float32(name)
	if err != nil {
		return nil, nil, err
	}
	if info.DType == safetensors.F8E4M3 {
		scale, err := s.F.Float32(name + scaleSuffix)
		if err != nil {
			return nil, nil, fmt.Errorf("fp8 tensor %q: its scale: %w", name, err)
		}
		if v, err = dequantize(v, info.Shape, scale); err != nil {
			return nil, nil, fmt.Errorf("fp8 tensor %q: %w", name, err)
		}
	}
	return info.Shape, v, nil
}

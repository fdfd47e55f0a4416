package ncnn

import (
	"github.com/vsr-dev/vsr/tensor/half"

	"encoding/binary"
	"fmt"
	"math"
)

// Storage tags that precede a tagged weight array in a .bin file.
const (
	tagFP16 = 0x01306B47
	tagInt8 = 0x000D4B38
	tagFP32 = 0x0002C056
)

// WeightReader reads weight arrays from a .bin blob in the order the layers
// consume them, as ncnn's ModelBinFromDataReader does.
type WeightReader struct {
	data []byte
	off  int
}

// NewWeightReader reads from the bytes of a .bin file.
func NewWeightReader(data []byte) *WeightReader { return &WeightReader{data: data} }

// Offset is the number of bytes consumed so far.
func (r *WeightReader) Offset() int { return r.off }

// Remaining is the number of bytes not yet consumed.
func (r *WeightReader) Remaining() int { return len(r.data) - r.off }

func (r *WeightReader) take(n int, what string) ([]byte, error) {
	if n < 0 || n > len(r.data)-r.off {
		return nil, fmt.Errorf("%s: weight file too short: need %d bytes at offset %d, only %d left", what, n, r.off, len(r.data)-r.off)
	}
	b := r.data[r.off : r.off+n]
	r.off += n
	return b, nil
}

// check rejects counts that cannot fit in what is left, before any
// arithmetic on them can overflow.
func (r *WeightReader) check(n int, what string) error {
	if n < 0 {
		return fmt.Errorf("%s: negative weight count %d", what, n)
	}
	if n > len(r.data)-r.off {
		return fmt.Errorf("%s: weight file too short: need %d values at offset %d, only %d bytes left", what, n, r.off, len(r.data)-r.off)
	}
	return nil
}

// Raw reads n little-endian float32 values with no storage tag (biases,
// PReLU slopes).
func (r *WeightReader) Raw(n int, what string) ([]float32, error) {
	if err := r.check(n, what); err != nil {
		return nil, err
	}
	b, err := r.take(4*n, what)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// Tagged reads n values stored behind a 4-byte storage tag: fp16, fp32, or
// ncnn's 256-entry quantization table. int8 weights are rejected.
func (r *WeightReader) Tagged(n int, what string) ([]float32, error) {
	if err := r.check(n, what); err != nil {
		return nil, err
	}
	hb, err := r.take(4, what)
	if err != nil {
		return nil, err
	}
	tag := binary.LittleEndian.Uint32(hb)
	out := make([]float32, n)
	switch {
	case tag == tagFP16:
		b, err := r.take(align4(2*n), what)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = half.FromF16(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case tag == tagInt8:
		return nil, fmt.Errorf("%s: int8-quantized weights are not supported; export the model in fp16 or fp32", what)
	case tag == tagFP32 || tag == 0:
		b, err := r.take(4*n, what)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	default:
		// Any other non-zero flag: a 256-entry float table followed by one
		// uint8 index per value.
		tb, err := r.take(256*4, what)
		if err != nil {
			return nil, err
		}
		b, err := r.take(align4(n), what)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(tb[4*int(b[i]):]))
		}
	}
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%s: weight %d is %v; the weight file is corrupt", what, i, v)
		}
	}
	return out, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

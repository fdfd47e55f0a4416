package safetensors

import (
	"github.com/vsr-dev/vsr/tensor/half"

	"encoding/binary"
	"math"
)

// DType is a safetensors element type as spelled in the header, e.g. "BF16".
// The types this package reads and writes are the constants below; any other
// dtype in a header is an error.
type DType string

// The supported element types.
const (
	BF16 DType = "BF16" // bfloat16: the upper half of an IEEE float32
	F16  DType = "F16"  // IEEE 754 binary16
	F32  DType = "F32"  // IEEE 754 binary32
	F64  DType = "F64"  // IEEE 754 binary64
	I64  DType = "I64"  // signed 64-bit integer
	I32  DType = "I32"  // signed 32-bit integer
	I16  DType = "I16"  // signed 16-bit integer
	I8   DType = "I8"   // signed 8-bit integer
	U8   DType = "U8"   // unsigned 8-bit integer
	BOOL DType = "BOOL" // one byte per element, 0 or 1
	// F8E4M3 is float8 e4m3fn (torch.float8_e4m3fn); its values usually
	// carry a scale in another tensor (a layer's weight_scale).
	F8E4M3 DType = "F8_E4M3"
)

// dtypeNames lists the supported dtypes for error messages.
const dtypeNames = "BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3"

// Size is the size of one element in bytes, or 0 for an unsupported dtype.
func (d DType) Size() int {
	switch d {
	case BF16, F16, I16:
		return 2
	case F32, I32:
		return 4
	case F64, I64:
		return 8
	case I8, U8, BOOL, F8E4M3:
		return 1
	}
	return 0
}

// Float32ToBF16 encodes v as little-endian bfloat16, rounding each value to
// the nearest representable one (ties to even).
func Float32ToBF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], half.ToBF16(x))
	}
	return out
}

// Float32ToF16 encodes v as little-endian IEEE binary16, rounding each value
// to the nearest representable one (ties to even); values beyond the half
// range become infinities.
func Float32ToF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], half.ToF16(x))
	}
	return out
}

// Float32Bytes encodes v as little-endian float32, bit for bit.
func Float32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// Float32ToE4M3 encodes v as float8 e4m3fn, rounding to the nearest value
// (ties to even) and saturating at ±448.
func Float32ToE4M3(v []float32) []byte {
	out := make([]byte, len(v))
	for i, x := range v {
		out[i] = half.ToE4M3(x)
	}
	return out
}

// toFloat32 decodes little-endian BF16, F16 or F32 data, or F8_E4M3 (its
// raw values, without any scale).
func toFloat32(d DType, b []byte) ([]float32, bool) {
	switch d {
	case F8E4M3:
		out := make([]float32, len(b))
		for i, x := range b {
			out[i] = half.FromE4M3(x)
		}
		return out, true
	case BF16, F16:
		return half.DecodeSlice(b, d == BF16), true
	case F32:
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, true
	}
	return nil, false
}

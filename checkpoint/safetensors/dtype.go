package safetensors

import (
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
)

// dtypeNames lists the supported dtypes for error messages.
const dtypeNames = "BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL"

// Size is the size of one element in bytes, or 0 for an unsupported dtype.
func (d DType) Size() int {
	switch d {
	case BF16, F16, I16:
		return 2
	case F32, I32:
		return 4
	case F64, I64:
		return 8
	case I8, U8, BOOL:
		return 1
	}
	return 0
}

// bf16ToF32 widens a bfloat16 exactly.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f16ToF32 widens an IEEE binary16 exactly, subnormals, infinities and NaN
// payloads included.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// Subnormal: mant * 2^-24, normalised for float32.
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// f32ToBF16 rounds to the nearest bfloat16, ties to even; NaN stays NaN.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign and top payload, force quiet
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// f32ToF16 rounds to the nearest binary16, ties to even, overflowing to
// infinity and through the subnormals to zero; NaN stays NaN.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN: keep the top payload bits, force quiet
		return sign | 0x7e00 | uint16(a>>13)&0x1ff
	case a >= 0x477ff000: // rounds to >= 65520: infinity
		return sign | 0x7c00
	case a >= 0x38800000: // normal half (>= 2^-14)
		// Rebias the exponent (127 -> 15) and round the 13 dropped bits.
		a -= 112 << 23
		return sign | uint16((a+0xfff+(a>>13)&1)>>13)
	case a < 0x33000000: // below 2^-25: rounds to zero (2^-25 itself ties to 0)
		return sign
	}
	// Subnormal half: value = m * 2^-24 with m = mantissa(1.x) >> shift.
	e := a >> 23
	m := a&0x7fffff | 0x800000
	shift := 126 - e // 14..24 for e in 102..112
	half := uint32(1) << (shift - 1)
	r := m >> shift
	rem := m & (1<<shift - 1)
	if rem > half || rem == half && r&1 == 1 {
		r++
	}
	return sign | uint16(r)
}

// Float32ToBF16 encodes v as little-endian bfloat16, rounding each value to
// the nearest representable one (ties to even).
func Float32ToBF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], f32ToBF16(x))
	}
	return out
}

// Float32ToF16 encodes v as little-endian IEEE binary16, rounding each value
// to the nearest representable one (ties to even); values beyond the half
// range become infinities.
func Float32ToF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], f32ToF16(x))
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

// toFloat32 decodes little-endian BF16, F16 or F32 data.
func toFloat32(d DType, b []byte) ([]float32, bool) {
	switch d {
	case BF16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = bf16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, true
	case F16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = f16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, true
	case F32:
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, true
	}
	return nil, false
}

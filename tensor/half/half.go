// Package half converts between float32 and the 16-bit floating-point
// formats vsr stores weights and activations in: IEEE binary16 (fp16) and
// bfloat16. Widening is exact; narrowing rounds to nearest, ties to even.
package half

import (
	"math"
	"runtime"
	"sync"
)

// FromBF16 widens a bfloat16 exactly.
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FromF16 widens an IEEE binary16 exactly, subnormals, infinities and NaN
// payloads included.
func FromF16(h uint16) float32 {
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

// ToBF16 rounds a float32 to the nearest bfloat16, ties to even; NaN stays NaN.
func ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign and top payload, force quiet
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// ToF16 rounds a float32 to the nearest binary16, ties to even, overflowing to
// infinity and through the subnormals to zero; NaN stays NaN.
func ToF16(f float32) uint16 {
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

// chunked runs f over [0, n) in pieces on all cores when n is large.
func chunked(n int, f func(lo, hi int)) {
	const piece = 1 << 20
	if n <= piece {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < n; lo += piece {
		wg.Add(1)
		sem <- struct{}{}
		go func(lo int) {
			defer func() { <-sem; wg.Done() }()
			f(lo, min(lo+piece, n))
		}(lo)
	}
	wg.Wait()
}

// DecodeSlice converts little-endian 16-bit values (bf16 when bf16, else
// fp16) to float32, on all cores for large slices.
func DecodeSlice(src []byte, bf16 bool) []float32 {
	out := make([]float32, len(src)/2)
	chunked(len(out), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			h := uint16(src[2*i]) | uint16(src[2*i+1])<<8
			if bf16 {
				out[i] = FromBF16(h)
			} else {
				out[i] = FromF16(h)
			}
		}
	})
	return out
}

// EncodeSlice converts float32 values to bf16 (when bf16) or fp16, on all
// cores for large slices.
func EncodeSlice(src []float32, bf16 bool) []uint16 {
	out := make([]uint16, len(src))
	chunked(len(out), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if bf16 {
				out[i] = ToBF16(src[i])
			} else {
				out[i] = ToF16(src[i])
			}
		}
	})
	return out
}

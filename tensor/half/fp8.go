package half

import "math"

// E4M3Max is the largest finite float8 e4m3fn value (OCP FP8, as
// torch.float8_e4m3fn): 1.75 x 2^8.
const E4M3Max = 448

// FromE4M3 decodes a float8 e4m3fn value: 1 sign bit, 4 exponent bits
// (bias 7), 3 mantissa bits, subnormals, no infinities, NaN at exponent
// and mantissa all ones.
func FromE4M3(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	e, m := int(b>>3&0xF), int(b&7)
	switch {
	case e == 15 && m == 7:
		return float32(math.NaN())
	case e == 0:
		return sign * float32(math.Ldexp(float64(m), -9)) // m/8 x 2^-6
	}
	return sign * float32(math.Ldexp(float64(8+m), e-10)) // (1+m/8) x 2^(e-7)
}

// ToE4M3 encodes f as float8 e4m3fn, rounding to the nearest value (ties
// to an even mantissa) and saturating at ±E4M3Max (the format has no
// infinities); NaN stays NaN.
func ToE4M3(f float32) uint8 {
	if f != f {
		return 0x7F
	}
	var s uint8
	if math.Signbit(float64(f)) {
		s, f = 0x80, -f
	}
	if f >= E4M3Max {
		return s | 0x7E
	}
	// The value in units of the smallest step of its binade: subnormals
	// and the first normal binade share the step 2^-9.
	_, exp := math.Frexp(float64(f)) // f = frac x 2^exp, frac in [0.5, 1)
	e := max(exp-1, -6)              // the binade's exponent, 2^e <= f
	q := math.RoundToEven(math.Ldexp(float64(f), 3-e))
	if q >= 16 { // rounded up into the next binade
		e++
		q /= 2
	}
	if q < 8 { // a subnormal (e is -6)
		return s | uint8(q)
	}
	if e > 8 || (e == 8 && q > 14) {
		return s | 0x7E
	}
	return s | uint8(e+7)<<3 | uint8(q-8)
}

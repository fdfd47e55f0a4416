package cudnn

import "math"

// f32ToF16 rounds f to the nearest IEEE half (ties to even).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	if e == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	exp := e - 127 + 15
	if exp >= 0x1f {
		return sign | 0x7c00
	}
	if exp <= 0 {
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		f := float32(mant) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// f32ToBF16 rounds f to the nearest bfloat16 (ties to even).
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// encode rounds vals to dt, returns the raw 16-bit values and replaces vals
// by what they were rounded to, so the reference sees the same inputs.
func encode(dt DataType, vals []float64) []uint16 {
	out := make([]uint16, len(vals))
	for i, v := range vals {
		if dt == DataBFloat16 {
			out[i] = f32ToBF16(float32(v))
			vals[i] = float64(bf16ToF32(out[i]))
		} else {
			out[i] = f32ToF16(float32(v))
			vals[i] = float64(f16ToF32(out[i]))
		}
	}
	return out
}

func decode(dt DataType, raw []uint16) []float64 {
	out := make([]float64, len(raw))
	for i, h := range raw {
		if dt == DataBFloat16 {
			out[i] = float64(bf16ToF32(h))
		} else {
			out[i] = float64(f16ToF32(h))
		}
	}
	return out
}

// convRef is the float64 cross-correlation of NHWC x with KRSC w, plus an
// optional per-K bias, giving NHWC y.
func convRef(s Shape, x, w, bias []float64) []float64 {
	s = s.Normalized()
	ho, wo := s.OutHW()
	y := make([]float64, s.N*ho*wo*s.K)
	for n := 0; n < s.N; n++ {
		for oh := 0; oh < ho; oh++ {
			for ow := 0; ow < wo; ow++ {
				out := y[((n*ho+oh)*wo+ow)*s.K:][:s.K]
				for k := 0; k < s.K; k++ {
					acc := 0.0
					if bias != nil {
						acc = bias[k]
					}
					for r := 0; r < s.KH; r++ {
						ih := oh*s.StrideH - s.PadH + r*s.DilationH
						if ih < 0 || ih >= s.H {
							continue
						}
						for q := 0; q < s.KW; q++ {
							iw := ow*s.StrideW - s.PadW + q*s.DilationW
							if iw < 0 || iw >= s.W {
								continue
							}
							xv := x[((n*s.H+ih)*s.W+iw)*s.C:][:s.C]
							wv := w[((k*s.KH+r)*s.KW+q)*s.C:][:s.C]
							for c := range xv {
								acc += xv[c] * wv[c]
							}
						}
					}
					out[k] = acc
				}
			}
		}
	}
	return y
}

// relErr is ||got-want|| / ||want||.
func relErr(got, want []float64) float64 {
	var d, r float64
	for i := range want {
		e := got[i] - want[i]
		d += e * e
		r += want[i] * want[i]
	}
	return math.Sqrt(d) / math.Sqrt(r)
}

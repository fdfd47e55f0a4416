package cudnn

import (
	"github.com/vsr-dev/vsr/internal/testutil"
	"github.com/vsr-dev/vsr/tensor/half"
)

// encode rounds vals to dt, returns the raw 16-bit values and replaces vals
// by what they were rounded to, so the reference sees the same inputs.
func encode(dt DataType, vals []float64) []uint16 {
	out := make([]uint16, len(vals))
	for i, v := range vals {
		if dt == DataBFloat16 {
			out[i] = half.ToBF16(float32(v))
			vals[i] = float64(half.FromBF16(out[i]))
		} else {
			out[i] = half.ToF16(float32(v))
			vals[i] = float64(half.FromF16(out[i]))
		}
	}
	return out
}

func decode(dt DataType, raw []uint16) []float64 {
	out := make([]float64, len(raw))
	for i, h := range raw {
		if dt == DataBFloat16 {
			out[i] = float64(half.FromBF16(h))
		} else {
			out[i] = float64(half.FromF16(h))
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
var relErr = testutil.RelErr[float64]

package half

import (
	"math"
	"testing"
)

func TestHalfConversions(t *testing.T) {
	cases := []struct {
		f    float32
		h, b uint16
	}{
		{1, 0x3c00, 0x3f80}, {-2, 0xc000, 0xc000}, {65504, 0x7bff, 0x4780}, {1e9, 0x7c00, 0x4e6e},
		{float32(math.Ldexp(1, -24)), 0x0001, 0x3380}, {0.1, 0x2e66, 0x3dcd},
	}
	for _, c := range cases {
		if g := ToF16(c.f); g != c.h {
			t.Errorf("ToF16(%g) = %#04x, want %#04x", c.f, g, c.h)
		}
		if g := ToBF16(c.f); g != c.b {
			t.Errorf("ToBF16(%g) = %#04x, want %#04x", c.f, g, c.b)
		}
	}
}

// TestRoundTrip: every fp16 and bf16 value (but NaN) widens to float32 and
// narrows back to itself.
func TestRoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if f := FromF16(h); !math.IsNaN(float64(f)) && ToF16(f) != h {
			t.Fatalf("fp16 %#04x -> %g -> %#04x", h, f, ToF16(f))
		}
		if f := FromBF16(h); !math.IsNaN(float64(f)) && ToBF16(f) != h {
			t.Fatalf("bf16 %#04x -> %g -> %#04x", h, f, ToBF16(f))
		}
	}
}

// TestSlices checks the parallel slice conversions against the scalar ones
// on a slice longer than one piece.
func TestSlices(t *testing.T) {
	n := 3<<20 + 7
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i%1000-500) * 0.37
	}
	for _, bf := range []bool{true, false} {
		enc := EncodeSlice(src, bf)
		raw := make([]byte, 2*n)
		for i, h := range enc {
			want := ToF16(src[i])
			if bf {
				want = ToBF16(src[i])
			}
			if h != want {
				t.Fatalf("bf16 %v: element %d encoded %#x, want %#x", bf, i, h, want)
			}
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		}
		for i, v := range DecodeSlice(raw, bf) {
			want := FromF16(enc[i])
			if bf {
				want = FromBF16(enc[i])
			}
			if v != want {
				t.Fatalf("bf16 %v: element %d decoded %g, want %g", bf, i, v, want)
			}
		}
	}
}

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

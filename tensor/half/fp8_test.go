package half

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestE4M3Values checks values the OCP FP8 specification lists.
func TestE4M3Values(t *testing.T) {
	for _, c := range []struct {
		b uint8
		v float32
	}{
		{0x00, 0}, {0x80, float32(math.Copysign(0, -1))}, {0x01, 1.0 / 512}, {0x07, 7.0 / 512}, {0x08, 1.0 / 64},
		{0x38, 1}, {0x39, 1.125}, {0x40, 2}, {0x7E, 448}, {0xFE, -448}, {0x77, 240}, {0xB8, -1},
	} {
		if got := FromE4M3(c.b); got != c.v || math.Signbit(float64(got)) != math.Signbit(float64(c.v)) {
			t.Errorf("FromE4M3(%#02x) = %v, want %v", c.b, got, c.v)
		}
	}
	for _, b := range []uint8{0x7F, 0xFF} {
		if v := FromE4M3(b); v == v {
			t.Errorf("FromE4M3(%#02x) = %v, want NaN", b, v)
		}
	}
}

// TestE4M3Rounding: every finite code round-trips, and any float32 encodes
// to the nearest finite value found by searching all 254 of them (the
// even code on a tie), saturating beyond 448.
func TestE4M3Rounding(t *testing.T) {
	var finite []uint8
	for b := 0; b < 256; b++ {
		if b&0x7F == 0x7F {
			continue
		}
		finite = append(finite, uint8(b))
		if got := ToE4M3(FromE4M3(uint8(b))); got != uint8(b) && !(b == 0x80 && got == 0x80) {
			t.Errorf("round trip of %#02x gave %#02x", b, got)
		}
	}
	nearest := func(f float32) uint8 {
		best, bd := uint8(0), math.Inf(1)
		for _, b := range finite {
			d := math.Abs(float64(FromE4M3(b)) - float64(f))
			if d < bd || (d == bd && b&1 == 0 && math.Signbit(float64(FromE4M3(b))) == math.Signbit(float64(f))) {
				best, bd = b, d
			}
		}
		return best
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		f := float32(math.Ldexp(r.Float64()*2-1, r.IntN(22)-12))
		got, want := ToE4M3(f), nearest(f)
		if FromE4M3(got) != FromE4M3(want) {
			t.Fatalf("ToE4M3(%v) = %#02x (%v), nearest %#02x (%v)", f, got, FromE4M3(got), want, FromE4M3(want))
		}
	}
	for _, f := range []float32{448, 449, 1e9, float32(math.Inf(1))} {
		if ToE4M3(f) != 0x7E || ToE4M3(-f) != 0xFE {
			t.Errorf("%v does not saturate", f)
		}
	}
	if v := FromE4M3(ToE4M3(float32(math.NaN()))); v == v {
		t.Error("NaN lost")
	}
}

package swiftvr

import (
	"slices"
	"testing"
)

// TestWindowStarts checks the start lists published for the official rule
// (docs/SWIFTVR.md, from SwiftVR's transformer.py) and the properties
// every list must have.
func TestWindowStarts(t *testing.T) {
	for _, c := range []struct {
		n, shift int
		want     []int
	}{
		{45, 0, []int{0, 16, 29}},
		{45, 8, []int{0, 8, 24, 29}},
		{80, 8, []int{0, 8, 24, 40, 56, 64}},
		{25, 8, []int{0, 9}},
		{80, 0, []int{0, 16, 32, 48, 64}},
		{16, 8, []int{0}},
		{7, 0, []int{0}},
	} {
		if got := WindowStarts(c.n, c.shift); !slices.Equal(got, c.want) {
			t.Errorf("n=%d shift=%d: %v, want %v", c.n, c.shift, got, c.want)
		}
	}
	for n := 1; n <= 200; n++ {
		for _, shift := range []int{0, 8} {
			st := WindowStarts(n, shift)
			for _, shifted := range []bool{false, true} {
				own := WindowOwners(n, st, shifted)
				for p, o := range own {
					if o < 0 || p < st[o] || p >= st[o]+min(Window, n) {
						t.Fatalf("n=%d shift=%d: token %d owned by window %d %v", n, shift, p, o, st)
					}
				}
			}
			for i, s := range st {
				if s < 0 || s+min(Window, n) > n || (i > 0 && s <= st[i-1]) {
					t.Fatalf("n=%d shift=%d: bad starts %v", n, shift, st)
				}
			}
		}
	}
}

func TestWindowOwners(t *testing.T) {
	st := WindowStarts(45, 8) // [0 8 24 29]
	un := WindowOwners(45, st, false)
	sh := WindowOwners(45, st, true)
	// Token 10 is in windows 0 ([0,16)) and 1 ([8,24)): first is 0, last is 1.
	// Token 30 is in windows 2 ([24,40)) and 3 ([29,45)).
	if un[10] != 0 || sh[10] != 1 || un[30] != 2 || sh[30] != 3 || un[44] != 3 || sh[0] != 0 {
		t.Errorf("owners: unshifted %v, shifted %v", un, sh)
	}
}

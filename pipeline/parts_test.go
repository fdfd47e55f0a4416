package pipeline

import (
	"math"
	"slices"
	"testing"
)

// TestPartsAndGroups: parts cut where asked, and at the segments'
// boundaries where too few; groups of contiguous parts, one part at least
// each, of about equal frames.
func TestPartsAndGroups(t *testing.T) {
	for _, c := range []struct {
		total, nseg int
		at          []int
		parts       []part
		groups      []int
	}{
		{30, 1, []int{9, 17, 25}, []part{{0, 9}, {9, 8}, {17, 8}, {25, 5}}, []int{0, 4}},
		{30, 2, []int{9, 17, 25}, []part{{0, 9}, {9, 8}, {17, 8}, {25, 5}}, []int{0, 2, 4}},
		{30, 4, []int{20}, []part{{0, 7}, {7, 8}, {15, 5}, {20, 2}, {22, 8}}, []int{0, 1, 2, 4, 5}},
		{12, 4, nil, []part{{0, 3}, {3, 3}, {6, 3}, {9, 3}}, []int{0, 1, 2, 3, 4}},
		{10, 1, nil, []part{{0, 10}}, []int{0, 1}},
		{100, 3, []int{10, 20, 30, 40, 50, 60, 70, 80, 90}, nil, []int{0, 4, 7, 10}},
	} {
		ps := partsAt(c.total, c.nseg, c.at)
		if c.parts != nil && !slices.Equal(ps, c.parts) {
			t.Errorf("partsAt(%d, %d, %v) = %v, want %v", c.total, c.nseg, c.at, ps, c.parts)
		}
		if g := group(ps, c.nseg); !slices.Equal(g, c.groups) {
			t.Errorf("group(%v, %d) = %v, want %v", ps, c.nseg, g, c.groups)
		}
	}
}

// TestPartFrames: seconds that are no positive finite number take the
// default; the result is at least 1 frame and fits an int32.
func TestPartFrames(t *testing.T) {
	def := partFrames(DefaultCheckpointEvery, 25)
	for _, sec := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := partFrames(sec, 25); got != def {
			t.Errorf("partFrames(%v, 25) = %d, want the default's %d", sec, got, def)
		}
	}
	if got := partFrames(1e-9, 25); got != 1 {
		t.Errorf("a tiny part: %d frames, want 1", got)
	}
	if got := partFrames(1e300, 25); got != math.MaxInt32 {
		t.Errorf("a huge part: %d frames, want MaxInt32", got)
	}
	if got := partFrames(2, math.NaN()); got != 50 {
		t.Errorf("no frame rate: %d frames, want 2 s at 25", got)
	}
}

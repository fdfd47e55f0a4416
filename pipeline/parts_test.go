package pipeline

import (
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

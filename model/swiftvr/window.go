package swiftvr

// Mask-free shifted-window attention (MFSWA) partitions each spatial axis of
// the DiT's token grid into windows of Window tokens that never need a mask:
// edge windows overlap instead of being padded. These functions compute the
// window starts along one axis and which window owns each token's output.

// Window is the MFSWA window size in tokens along each spatial axis; odd
// blocks shift by Window/2.
const Window = 16

// WindowStarts returns the window starts along an axis of n tokens: the
// candidates k*Window - shift clamped to [0, n-Window] and de-duplicated,
// then each middle start dropped when its neighbours already cover it
// (next <= previous + Window). An axis shorter than a window has one
// window, clipped to the axis.
func WindowStarts(n, shift int) []int {
	if n <= Window {
		return []int{0}
	}
	last := n - Window
	var cand []int
	for k := 0; k*Window-shift < n; k++ {
		s := min(max(k*Window-shift, 0), last)
		if len(cand) == 0 || cand[len(cand)-1] != s {
			cand = append(cand, s)
		}
	}
	out := []int{cand[0]}
	for i := 1; i < len(cand); i++ {
		if i+1 < len(cand) && cand[i+1] <= out[len(out)-1]+Window {
			continue // covered by the windows on either side
		}
		out = append(out, cand[i])
	}
	return out
}

// WindowOwners returns, for each of n tokens, the index into starts of the
// window whose output the token keeps: the first window holding it in
// unshifted blocks, the last in shifted blocks.
func WindowOwners(n int, starts []int, shifted bool) []int {
	size := min(Window, n)
	own := make([]int, n)
	for p := range own {
		own[p] = -1
		for i, s := range starts {
			if s <= p && p < s+size {
				own[p] = i
				if !shifted {
					break
				}
			}
		}
	}
	return own
}

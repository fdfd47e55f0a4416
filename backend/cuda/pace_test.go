package cuda

import "testing"

// TestPacerSettings checks VSR_CUDA_PACE: unset is the default bound, 0
// turns pacing off, N bounds the queue to N ops in paceDepth steps.
func TestPacerSettings(t *testing.T) {
	for _, c := range []struct {
		env   string
		off   bool
		every int
	}{{"", false, paceOps}, {"0", true, paceOps}, {"-1", true, paceOps}, {"1024", false, 1024 / paceDepth}, {"2", false, 1}, {"x", false, paceOps}} {
		t.Setenv("VSR_CUDA_PACE", c.env)
		p := newPacer()
		if p.off != c.off || (!c.off && p.every != c.every) {
			t.Errorf("VSR_CUDA_PACE=%q: off %v, every %d; want %v, %d", c.env, p.off, p.every, c.off, c.every)
		}
	}
}

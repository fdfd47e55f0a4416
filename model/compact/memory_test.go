package compact

import (
	"context"
	"runtime/metrics"
	"testing"

	"github.com/vsr-dev/vsr/backend/cpu"
)

// TestCPUHeapBounded restores a few hundred small frames one at a time on
// the CPU backend and requires the live heap after a collection to stay
// flat: scratch memory must be reused, not made anew on every call.
func TestCPUHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("restores 300 frames")
	}
	b := cpu.New(0)
	defer b.Close()
	m, err := LoadBundled(b, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w, h := 64, 48
	in := randFrames(1, w, h, 7)
	ow, oh := m.OutputSize(w, h)
	out := make([]byte, ow*oh*3)
	// The live heap as the last automatic collection found it: forcing a
	// collection would hide scratch that survives between natural ones.
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	var base uint64
	for i := range 400 {
		if err := m.Upscale(context.Background(), in, 1, w, h, out, 0); err != nil {
			t.Fatal(err)
		}
		if i == 99 {
			base = live()
		}
	}
	end := live()
	t.Logf("live heap after 100 frames %.1f MB, after 400 frames %.1f MB", float64(base)/1e6, float64(end)/1e6)
	if end > base+8<<20 {
		t.Fatalf("live heap grew from %.1f MB to %.1f MB over 300 frames: CPU scratch is not reused", float64(base)/1e6, float64(end)/1e6)
	}
}

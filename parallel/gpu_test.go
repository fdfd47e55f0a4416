package parallel

import (
	"testing"

	"github.com/vsr-dev/vsr/backend"
	_ "github.com/vsr-dev/vsr/backend/cuda"
)

// openGPUs opens n backends on GPU 0, or skips.
func openGPUs(t *testing.T, n int, dtype string) []backend.Backend {
	var devs []backend.Backend
	for range n {
		b, err := backend.Open("cuda:0?dtype=" + dtype)
		if err != nil {
			t.Skip("no usable GPU: ", err)
		}
		t.Cleanup(func() { b.Close() })
		devs = append(devs, b)
	}
	return devs
}

// TestExchangesGPU runs the exchanges between ranks sharing GPU 0 (device
// to device copies ordered by events) and between a GPU and the CPU
// (staged through the host): the values arrive exactly.
func TestExchangesGPU(t *testing.T) {
	for _, dt := range []string{"bf16", "f32"} {
		devs := openGPUs(t, 3, dt)
		tr := testExchanges(t, devs)
		for r, st := range tr.Stats() {
			if st.Staged != 0 {
				t.Errorf("%s rank %d: %d messages staged through the host between ranks of one GPU", dt, r, st.Staged)
			}
		}
	}
	devs := append(openGPUs(t, 1, "f32"), cpus(1)...)
	tr := testExchanges(t, devs)
	if st := tr.Stats(); st[0].Staged == 0 || st[1].Staged == 0 {
		t.Errorf("GPU and CPU exchanged device to device: %+v", st)
	}
}

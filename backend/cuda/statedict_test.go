package cuda

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/statedict"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
	"github.com/vsr-dev/vsr/model/compact"
)

// stateDictGraph builds the graph of a state dict and loads it on b.
func stateDictGraph(t testing.TB, b backend.Backend, d *statedict.Dict) *compact.Graph {
	t.Helper()
	info, err := arch.Detect(d)
	if err != nil {
		t.Fatal(err)
	}
	g, err := arch.Build(info, d)
	if err != nil {
		t.Fatal(err)
	}
	m, err := compact.LoadFiles(b, info.Summary(), g.Param, g.Bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestStateDictAgainstCPU runs the graphs vsr builds from state dicts on
// the GPU against the CPU in every storage type: ESRGANs of
// realesrgan-x4plus's widths (the dense-block buffers) at x4, and at x2
// and x1 through the pixel unshuffle (a strided convolution), and
// SRVGGNetCompacts with PReLU and ReLU; and an x2 ESRGAN's tiles against
// its whole frame.
func TestStateDictAgainstCPU(t *testing.T) {
	rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	esrgan := func(in int) *statedict.Dict {
		return archtest.New(2).ESRGAN(archtest.RRDB{Features: 64, Growth: 32, Blocks: 2, In: in, Out: 3, Ups: 2}).D
	}
	dicts := map[string]*statedict.Dict{
		"ESRGAN x4":        esrgan(3),
		"ESRGAN x2":        esrgan(12),
		"ESRGAN x1":        esrgan(48),
		"Compact PReLU x4": archtest.New(3).Compact(64, 8, 3, 4, true).D,
		"Compact ReLU x2":  archtest.New(3).Compact(32, 4, 3, 2, false).D,
	}
	c := cpu.New(0)
	for name, d := range dicts {
		want := forward(t, c, stateDictGraph(t, c, d), rgb, 1, 32, 48)
		for _, dt := range allTypes {
			g := open(t, dt)
			got := forward(t, g, stateDictGraph(t, g, d), rgb, 1, 32, 48)
			if e := relErr(got, want); !(e <= bound(dt)) {
				t.Errorf("%s %v: relative error %.3g against the CPU, want <= %.3g", name, dt, e, bound(dt))
			} else {
				t.Logf("%s %v: relative error %.3g against the CPU", name, dt, e)
			}
		}
	}
	g := open(t, F16)
	m := stateDictGraph(t, g, dicts["ESRGAN x2"])
	whole := make([]byte, 2*48*2*32*3)
	if err := m.Upscale(context.Background(), rgb, 1, 48, 32, whole, 0); err != nil {
		t.Fatal(err)
	}
	tiled := make([]byte, len(whole))
	if err := m.Upscale(context.Background(), rgb, 1, 48, 32, tiled, 16); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole, tiled) {
		t.Error("ESRGAN x2 f16: tiles of 16 differ from the whole frame")
	}
}

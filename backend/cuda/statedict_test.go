package cuda

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/statedict"
	"github.com/vsr-dev/vsr/internal/testutil"
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

// TestPthGoldenGPU runs the first file of every ESRGAN, SRVGGNetCompact
// and SPAN case of testdata/pth on the GPU in float16 against the
// reference output of the independent PyTorch implementation, within the
// float16 bound against the CPU. An SRVGGNetCompact with LeakyReLU, which
// its weights cannot tell, is given act_type=leakyrelu as a converted
// file carries it.
func TestPthGoldenGPU(t *testing.T) {
	g := open(t, F16)
	for _, c := range testutil.PthCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			d, err := arch.Open(filepath.Join(testutil.PthDir, c.Files[0].Path), false)
			if err != nil {
				t.Fatal(err)
			}
			if c.Detect["act"] == "leakyrelu" {
				d.Metadata = map[string]string{"act_type": "leakyrelu"}
			}
			m := stateDictGraph(t, g, d)
			in, ref := c.Arrays(t)
			x, err := g.Upload(backend.Shape{N: 1, H: c.InputShape[2], W: c.InputShape[3], C: c.InputShape[1]}, in)
			if err != nil {
				t.Fatal(err)
			}
			y, err := m.Forward(x)
			x.Free()
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.Download(y)
			y.Free()
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr(got, ref); !(e <= bound(F16)) {
				t.Errorf("f16: relative error %.3g against the reference, want <= %.3g", e, bound(F16))
			} else {
				t.Logf("f16: relative error %.3g against the reference", e)
			}
		})
	}
}

package compact

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/internal/testutil"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/arch"
)

// The golden fixtures of testdata/pth (README.md there says how they were
// made): torch.save files of small models with random weights, the input
// and the output of an independent PyTorch implementation of each
// architecture (testutil.PthCases reads their manifest).

// pthGolden runs the case's input through the graph model m on b and
// returns the relative error against the reference output.
func pthGolden(t *testing.T, b backend.Backend, m model.Model, c testutil.PthCase) float64 {
	t.Helper()
	gm, ok := m.(*graphModel)
	if !ok {
		t.Fatalf("%s loads as a %T, not a graph", c.Name, m)
	}
	in, ref := c.Arrays(t)
	ic, ih, iw := c.InputShape[1], c.InputShape[2], c.InputShape[3]
	oc, oh, ow := c.OutputShape[1], c.OutputShape[2], c.OutputShape[3]
	x, err := b.Upload(backend.Shape{N: 1, H: ih, W: iw, C: ic}, in)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	y, err := gm.g.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	if s := y.Shape(); s != (backend.Shape{N: 1, H: oh, W: ow, C: oc}) {
		t.Fatalf("%s: output %v, want %v", c.Name, s, c.OutputShape)
	}
	got, err := b.Download(y)
	if err != nil {
		t.Fatal(err)
	}
	return relErr(got, ref)
}

// loadPth finds the family of path and loads it on b as --model would.
func loadPth(b backend.Backend, path string) (model.Model, error) {
	f, err := model.Find(path)
	if err != nil {
		return nil, err
	}
	if f.Name() != "compact" {
		return nil, fmt.Errorf("%s is taken by the %s family", path, f.Name())
	}
	return f.Load(b, path, model.Params{Default: model.Defaults(f.Params())})
}

// detectFacts compares what detection found in path with the manifest's
// detect entry: channels, width, depth, growth, pixel unshuffle,
// activation, Real-CUGAN's pro, and the elements of every tensor.
func detectFacts(t *testing.T, c testutil.PthCase, path string) *arch.Info {
	t.Helper()
	info, _, ok := arch.Sniff(path)
	if !ok {
		t.Fatalf("%s: not recognised", path)
	}
	want := map[string]any{"arch": c.Arch, "scale": c.Scale, "params": c.TensorElems}
	got := map[string]any{"arch": info.Arch, "scale": info.Scale, "params": info.Params}
	for k, v := range c.Detect {
		f, isNum := v.(float64)
		switch k {
		case "in_channels":
			got[k] = info.In
		case "out_channels":
			got[k] = info.Out
		case "features", "width":
			got[k] = info.Features
		case "blocks", "convs":
			got[k] = info.Blocks
		case "growth":
			got[k] = info.Growth
		case "unshuffle":
			got[k] = info.Unshuffle
		case "act":
			got[k] = info.Activation
		case "pro":
			got[k] = strings.Contains(info.Variant, "pro")
		default:
			continue // facts Info does not hold (the key layout, SPAN's norm, RealPLKSR's kernel)
		}
		want[k] = v
		if isNum {
			want[k] = int(f)
		}
	}
	for k := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(want[k]) {
			t.Errorf("%s: %s %v, want %v", path, k, got[k], want[k])
		}
	}
	return info
}

// TestPthGolden loads every file of every case of testdata/pth (ESRGAN,
// SRVGGNetCompact, SPAN, Real-CUGAN, RealPLKSR; zip, legacy and
// shared-storage .pth files, safetensors; plain, params_ema, params and
// module.-prefixed state dicts; F32, F16 and BF16 tensors) as --model
// does, checks what detection finds, and runs the case's input on the
// CPU in float32 against the reference output within 1e-5 relative.
//
// An SRVGGNetCompact with LeakyReLU cannot be told from its weights (no
// file of the case says it): it is detected as ReLU, and runs against the
// reference once its state dict carries act_type=leakyrelu.
func TestPthGolden(t *testing.T) {
	b := cpu.New(0)
	for _, c := range testutil.PthCases(t) {
		for _, f := range c.Files {
			t.Run(filepath.Base(f.Path), func(t *testing.T) {
				path := filepath.Join(testutil.PthDir, f.Path)
				if c.Detect["act"] == "leakyrelu" {
					path = leakyCopy(t, path)
				}
				detectFacts(t, c, path)
				m, err := loadPth(b, path)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if e := pthGolden(t, b, m, c); e > testutil.PthTolerance || math.IsNaN(e) {
					t.Errorf("relative error %.3g against the reference, want <= %g", e, testutil.PthTolerance)
				} else {
					t.Logf("relative error %.3g against the reference", e)
				}
			})
		}
	}
}

// leakyCopy checks that the SRVGGNetCompact at path, whose activation
// has no weights, is detected as ReLU and says the weights cannot tell,
// and returns a .safetensors copy whose metadata says LeakyReLU.
func leakyCopy(t *testing.T, path string) string {
	t.Helper()
	d, err := arch.Open(path, false)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.Detect(d)
	if err != nil {
		t.Fatal(err)
	}
	if info.Activation != "relu" || !strings.Contains(strings.Join(info.Evidence, "; "), "cannot tell ReLU from LeakyReLU") {
		t.Errorf("%s: activation %q, evidence %q: want relu and that the weights cannot tell", path, info.Activation, info.Evidence)
	}
	d.Metadata = map[string]string{"act_type": "leakyrelu"}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))+".safetensors")
	if err := arch.Write(out, d, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPthTiles checks that the graphs of the state dicts whose ops are
// all pointwise or convolutions tile exactly, with the halo their 3x3 and
// large-kernel convolutions add up to: SPAN's sigmoid, SiLU and scalar ops
// (conv_1, three per block, conv_2, upsampler.0: 21 pixels), RealPLKSR's
// LayerNorm variant with its per-pixel ChannelNorm, Mish and channel crops
// (per block two 3x3 and one 13x13: 8, twice, the first and last
// convolutions and the nearest upsample of the input: 19). A tile computed from its region with the halo gives
// the whole frame's float32 values bit for bit (the bytes of Upscale
// would not tell: gates damp distant pixels below a byte). Graphs that
// pad, crop, pool or normalise over the image run whole frames and say
// why.
func TestPthTiles(t *testing.T) {
	for _, c := range []struct {
		file        string
		halo, scale int
		whole       string
	}{
		{"span_x4.pth", 21, 4, ""},
		{"realplksr_x2_ln.pth", 19, 2, ""},
		{"realplksr_x4.pth", 0, 4, "layer feats.1.norm (GroupNorm) normalises over the whole image"},
		{"cugan_2x.pth", 0, 2, "layer pad (Padding) pads or crops the image"},
	} {
		t.Run(c.file, func(t *testing.T) {
			b := cpu.New(0)
			m, err := loadPth(b, filepath.Join(testutil.PthDir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			g := m.(*graphModel).g
			if c.whole != "" {
				if why := g.Untiled(); why != c.whole {
					t.Errorf("whole frames because %q, want %q", why, c.whole)
				}
				return
			}
			if g.Halo() != c.halo || g.Untiled() != "" {
				t.Fatalf("halo %d, whole frames because %q: want %d and tiles", g.Halo(), g.Untiled(), c.halo)
			}
			tileExact(t, b, g, c.scale)
		})
	}
}

// tileExact runs a tile of g (of scale s) with its halo and checks it
// against the whole frame, bit for bit.
func tileExact(t *testing.T, b backend.Backend, g *Graph, s int) {
	t.Helper()
	const w, h = 60, 50
	frame := randFrames(1, w, h, 39)
	in := make([]float32, len(frame))
	for i, v := range frame {
		in[i] = float32(v) / 255
	}
	fh, fw, err := g.fullSizes(h, w)
	if err != nil {
		t.Fatal(err)
	}
	run := func(rg region) []float32 {
		rw, rh := rg.x1-rg.x0, rg.y1-rg.y0
		crop := make([]float32, 0, rw*rh*3)
		for y := rg.y0; y < rg.y1; y++ {
			crop = append(crop, in[(y*w+rg.x0)*3:(y*w+rg.x1)*3]...)
		}
		x, err := b.Upload(backend.Shape{N: 1, H: rh, W: rw, C: 3}, crop)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Free()
		y, err := g.forward(x, rg, fh, fw)
		if err != nil {
			t.Fatal(err)
		}
		defer y.Free()
		out, err := b.Download(y)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	whole := run(region{0, h, 0, w, h, w})
	// a tile in the middle, [25, 30) x [24, 28), with the halo on every side
	ty0, ty1, tx0, tx1 := 24, 28, 25, 30
	rg := region{ty0 - g.Halo(), ty1 + g.Halo(), tx0 - g.Halo(), tx1 + g.Halo(), h, w}
	tile := run(rg)
	rw := (rg.x1 - rg.x0) * s
	for y := ty0 * s; y < ty1*s; y++ {
		for x := tx0 * s; x < tx1*s; x++ {
			for c := 0; c < 3; c++ {
				got := tile[((y-rg.y0*s)*rw+x-rg.x0*s)*3+c]
				if want := whole[(y*w*s+x)*3+c]; got != want {
					t.Fatalf("output (%d, %d) channel %d: %g in the tile, %g in the whole frame", x, y, c, got, want)
				}
			}
		}
	}
}

// TestPthBatch runs two different frames as one batch through the graphs
// whose ops look at a whole frame (Real-CUGAN's reflection pad and
// squeeze-excitation means, RealPLKSR's GroupNorm) and checks each output
// against the frame run alone: the statistics are per frame.
func TestPthBatch(t *testing.T) {
	const w, h = 23, 22
	for _, file := range []string{"cugan_4x.pth", "cugan_3x_pro.pth", "realplksr_x4.pth"} {
		t.Run(file, func(t *testing.T) {
			b := cpu.New(0)
			m, err := loadPth(b, filepath.Join(testutil.PthDir, file))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			g := m.(*graphModel).g
			frames := randFrames(2, w, h, 7)
			in := make([]float32, len(frames))
			for i, v := range frames {
				in[i] = float32(v) / 255
			}
			run := func(n int, v []float32) []float32 {
				x, err := b.Upload(backend.Shape{N: n, H: h, W: w, C: 3}, v)
				_, out := forwardTensor(t, b, g, x, err)
				return out
			}
			both := run(2, in)
			half := len(both) / 2
			for k := range 2 {
				one := run(1, in[k*w*h*3:][:w*h*3])
				if e := testutil.RelErr(both[k*half:][:half], one); e > 1e-6 {
					t.Errorf("frame %d of a batch of 2: relative error %.3g against it alone", k, e)
				}
			}
		})
	}
}

// TestPthLacksOps: a device without backend.UNet or backend.Norm refuses
// Real-CUGAN's and RealPLKSR's graphs in one line naming the layer.
func TestPthLacksOps(t *testing.T) {
	type plain struct{ backend.Backend } // the core ops only
	for file, want := range map[string]string{
		"cugan_2x.pth":     "layer pad (Padding): device cpu lacks the op",
		"realplksr_x4.pth": "layer feats.1.norm (GroupNorm): device cpu lacks the op",
	} {
		m, err := loadPth(plain{cpu.New(0)}, filepath.Join(testutil.PthDir, file))
		if err == nil {
			m.Close()
		}
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s on a device without the ops: %v, want one line with %q", file, err, want)
		}
	}
}

// TestPthFusesNormAdd checks that RealPLKSR's blocks end in one op, the
// GroupNorm with the block's input as its residual (no separate sum), and
// that each block's large-kernel convolution is written over its input's
// channels in place (no crop of the rest, no Concat).
func TestPthFusesNormAdd(t *testing.T) {
	m, err := loadPth(cpu.New(0), filepath.Join(testutil.PthDir, "realplksr_x4.pth"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := m.(*graphModel).g
	norms, fused := 0, 0
	for _, o := range g.ops {
		if o.kind == opNorm && o.groups > 0 {
			norms++
			if len(o.in) == 2 {
				fused++
			}
		}
	}
	if norms == 0 || fused != norms {
		t.Errorf("%d of %d GroupNorms carry their block's sum", fused, norms)
	}
	patches, concats := 0, 0
	for _, o := range g.ops {
		switch o.kind {
		case opPatch:
			patches++
		case opConcat:
			concats++
		}
	}
	if patches != norms || concats != 0 {
		t.Errorf("%d patches and %d Concats for %d blocks: want each block's large-kernel Concat patched in place", patches, concats, norms)
	}
}

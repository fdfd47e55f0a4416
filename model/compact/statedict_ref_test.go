package compact

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/statedict"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
)

// The reference below is an independent float64 implementation of
// RRDBNet and SRVGGNetCompact written from the published PyTorch modules
// (Real-ESRGAN's rrdbnet_arch.py and srvgg_arch.py, BasicSR's
// pixel_unshuffle): plain loops over channel-major images, sharing
// nothing with the graphs vsr builds but the state dict.

// chw is a channel-major image.
type chw struct {
	c, h, w int
	v       []float64
}

func newCHW(c, h, w int) chw { return chw{c, h, w, make([]float64, c*h*w)} }

func (x chw) at(c, y, i int) float64 { return x.v[(c*x.h+y)*x.w+i] }

// refConv is nn.Conv2d(k, stride 1, padding k/2) with the weights of key.
func refConv(t *testing.T, d *statedict.Dict, key string, x chw) chw {
	w, err := arch.Floats(d.Get(key + ".weight"))
	if err != nil {
		t.Fatal(key, err)
	}
	b, _ := arch.Floats(d.Get(key + ".bias"))
	s := d.Shape(key + ".weight")
	o, k := s[0], s[2]
	if s[1] != x.c {
		t.Fatalf("%s reads %d channels, the image has %d", key, s[1], x.c)
	}
	y := newCHW(o, x.h, x.w)
	for oc := 0; oc < o; oc++ {
		for yy := 0; yy < x.h; yy++ {
			for xx := 0; xx < x.w; xx++ {
				var acc float64
				if b != nil {
					acc = float64(b[oc])
				}
				for ic := 0; ic < x.c; ic++ {
					for ky := 0; ky < k; ky++ {
						for kx := 0; kx < k; kx++ {
							iy, ix := yy+ky-k/2, xx+kx-k/2
							if iy >= 0 && iy < x.h && ix >= 0 && ix < x.w {
								acc += float64(w[((oc*x.c+ic)*k+ky)*k+kx]) * x.at(ic, iy, ix)
							}
						}
					}
				}
				y.v[(oc*x.h+yy)*x.w+xx] = acc
			}
		}
	}
	return y
}

// refAct applies LeakyReLU(alpha) (ReLU for 0), or PReLU with slopes.
func refAct(x chw, alpha float64, slopes []float32) chw {
	y := newCHW(x.c, x.h, x.w)
	for i, v := range x.v {
		a := alpha
		if slopes != nil {
			a = float64(slopes[i/(x.h*x.w)])
		}
		if v < 0 {
			v *= a
		}
		y.v[i] = v
	}
	return y
}

// refAxpy is a*x + y.
func refAxpy(a float64, x, y chw) chw {
	z := newCHW(x.c, x.h, x.w)
	for i := range z.v {
		z.v[i] = a*x.v[i] + y.v[i]
	}
	return z
}

func refCat(parts ...chw) chw {
	y := chw{0, parts[0].h, parts[0].w, nil}
	for _, p := range parts {
		y.c += p.c
		y.v = append(y.v, p.v...)
	}
	return y
}

// refNearest is F.interpolate(scale_factor=s, mode="nearest").
func refNearest(x chw, s int) chw {
	y := newCHW(x.c, x.h*s, x.w*s)
	for c := 0; c < x.c; c++ {
		for yy := 0; yy < y.h; yy++ {
			for xx := 0; xx < y.w; xx++ {
				y.v[(c*y.h+yy)*y.w+xx] = x.at(c, yy/s, xx/s)
			}
		}
	}
	return y
}

// refUnshuffle is F.pixel_unshuffle(x, r); refShuffle F.pixel_shuffle.
func refUnshuffle(x chw, r int) chw {
	y := newCHW(x.c*r*r, x.h/r, x.w/r)
	for c := 0; c < x.c; c++ {
		for i := 0; i < r; i++ {
			for j := 0; j < r; j++ {
				for yy := 0; yy < y.h; yy++ {
					for xx := 0; xx < y.w; xx++ {
						y.v[((c*r*r+i*r+j)*y.h+yy)*y.w+xx] = x.at(c, yy*r+i, xx*r+j)
					}
				}
			}
		}
	}
	return y
}

func refShuffle(x chw, r int) chw {
	y := newCHW(x.c/(r*r), x.h*r, x.w*r)
	for c := 0; c < y.c; c++ {
		for yy := 0; yy < y.h; yy++ {
			for xx := 0; xx < y.w; xx++ {
				y.v[(c*y.h+yy)*y.w+xx] = x.at(c*r*r+(yy%r)*r+xx%r, yy/r, xx/r)
			}
		}
	}
	return y
}

// refRRDBNet is Real-ESRGAN's RRDBNet.forward with BasicSR's key names.
func refRRDBNet(t *testing.T, d *statedict.Dict, blocks, ups, unshuffle int, x chw) chw {
	if unshuffle > 1 {
		x = refUnshuffle(x, unshuffle)
	}
	feat := refConv(t, d, "conv_first", x)
	body := feat
	for b := 0; b < blocks; b++ {
		in := body
		for k := 1; k <= 3; k++ {
			parts := []chw{body}
			for c := 1; c <= 4; c++ {
				parts = append(parts, refAct(refConv(t, d, fmt.Sprintf("body.%d.rdb%d.conv%d", b, k, c), refCat(parts...)), 0.2, nil))
			}
			x5 := refConv(t, d, fmt.Sprintf("body.%d.rdb%d.conv5", b, k), refCat(parts...))
			body = refAxpy(0.2, x5, body)
		}
		body = refAxpy(0.2, body, in)
	}
	feat = refAxpy(1, refConv(t, d, "conv_body", body), feat)
	for u := 1; u <= ups; u++ {
		feat = refAct(refConv(t, d, fmt.Sprintf("conv_up%d", u), refNearest(feat, 2)), 0.2, nil)
	}
	return refConv(t, d, "conv_last", refAct(refConv(t, d, "conv_hr", feat), 0.2, nil))
}

// refSRVGG is SRVGGNetCompact.forward: alpha is the weightless
// activation's slope (0 for ReLU) when the body has no PReLU weights.
func refSRVGG(t *testing.T, d *statedict.Dict, convs, scale int, alpha float64, x chw) chw {
	y := x
	for i := 0; i <= convs; i++ {
		y = refConv(t, d, fmt.Sprintf("body.%d", 2*i), y)
		var slopes []float32
		if s := d.Get(fmt.Sprintf("body.%d.weight", 2*i+1)); s != nil {
			slopes, _ = arch.Floats(s)
		}
		y = refAct(y, alpha, slopes)
	}
	y = refShuffle(refConv(t, d, fmt.Sprintf("body.%d", 2*convs+2), y), scale)
	return refAxpy(1, y, refNearest(x, scale))
}

// testFrame is a w x h crop of a real frame, as RGB24 and as a
// channel-major image in [0, 1].
func testFrame(t *testing.T, w, h int) ([]byte, chw) {
	rgb, err := os.ReadFile(filepath.Join("..", "..", "testdata", "compact", "frame0_48x32.rgb"))
	if err != nil {
		t.Fatal(err)
	}
	var crop []byte
	x := newCHW(3, h, w)
	for y := 0; y < h; y++ {
		crop = append(crop, rgb[y*48*3:][:w*3]...)
		for i := 0; i < w; i++ {
			for c := 0; c < 3; c++ {
				x.v[(c*h+y)*w+i] = float64(rgb[(y*48+i)*3+c]) / 255
			}
		}
	}
	return crop, x
}

// buildGraph detects d's architecture and loads its graph on b.
func buildGraph(t *testing.T, b backend.Backend, d *statedict.Dict) *Graph {
	t.Helper()
	info, err := arch.Detect(d)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := arch.Build(info, d)
	if err != nil {
		t.Fatal(err)
	}
	g, err := LoadFiles(b, info.Title(), ag.Param, ag.Bin)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// compareRef runs g on the frame and compares with the reference's
// channel-major output.
func compareRef(t *testing.T, b backend.Backend, g *Graph, rgb []byte, w, h int, want chw) {
	t.Helper()
	s, got := forwardRGB8(t, b, g, rgb, w, h)
	if s.C != want.c || s.H != want.h || s.W != want.w {
		t.Fatalf("%s: output %v, want %dx%dx%d", g.Name, s, want.h, want.w, want.c)
	}
	ref := make([]float32, len(got))
	for c := 0; c < want.c; c++ {
		for yy := 0; yy < want.h; yy++ {
			for xx := 0; xx < want.w; xx++ {
				ref[(yy*want.w+xx)*want.c+c] = float32(want.at(c, yy, xx))
			}
		}
	}
	if e := relErr(got, ref); e > 1e-5 || math.IsNaN(e) {
		t.Errorf("%s: relative error %.3g against the reference, want < 1e-5", g.Name, e)
	}
}

// TestStateDictReference runs the graphs built from synthetic ESRGAN
// state dicts (x4; x2 and x1 through the pixel unshuffle; x8 with the old
// key names; BSRGAN's key names) and SRVGGNetCompact ones (PReLU, ReLU,
// LeakyReLU) on the CPU against the reference.
func TestStateDictReference(t *testing.T) {
	b := cpu.New(0)
	const w, h = 16, 12
	rgb, x := testFrame(t, w, h)
	rrdb := func(in, ups int) archtest.RRDB {
		return archtest.RRDB{Features: 8, Growth: 4, Blocks: 2, In: in, Out: 3, Ups: ups}
	}
	for _, c := range []struct {
		name     string
		in, ups  int
		unshuf   int
		variants func(*archtest.Builder, archtest.RRDB) *archtest.Builder
	}{
		{"x4", 3, 2, 1, (*archtest.Builder).ESRGANBSRGAN},
		{"x2", 12, 2, 2, (*archtest.Builder).ESRGANOld},
		{"x1", 48, 2, 4, (*archtest.Builder).ESRGANOld},
		{"x8", 3, 3, 1, (*archtest.Builder).ESRGANOld},
	} {
		r := rrdb(c.in, c.ups)
		d := archtest.New(7).ESRGAN(r).D
		want := refRRDBNet(t, d, r.Blocks, r.Ups, c.unshuf, x)
		// The same weights under the other key names build the same graph.
		for _, dd := range []*statedict.Dict{d, c.variants(archtest.New(7), r).D} {
			g := buildGraph(t, b, dd)
			compareRef(t, b, g, rgb, w, h, want)
			g.Close()
		}
	}
	for _, c := range []struct {
		act   string
		scale int
		alpha float64
	}{{"prelu", 3, 0}, {"relu", 2, 0}, {"leakyrelu", 4, 0.1}} {
		bl := archtest.New(3).Compact(8, 3, 3, c.scale, c.act == "prelu")
		if c.act == "leakyrelu" {
			bl.D.Metadata["act_type"] = "leakyrelu"
		}
		g := buildGraph(t, b, bl.D)
		compareRef(t, b, g, rgb, w, h, refSRVGG(t, bl.D, 3, c.scale, c.alpha, x))
		g.Close()
	}
}

// TestStateDictUnshuffleTiles checks that an x2 ESRGAN (a pixel unshuffle
// in front) tiles exactly: tiles give the whole frame's output bit for
// bit, and a frame whose size is not a multiple of the unshuffle is
// refused.
func TestStateDictUnshuffleTiles(t *testing.T) {
	b := cpu.New(0)
	const w, h = 40, 24
	rgb, _ := testFrame(t, w, h)
	g := buildGraph(t, b, archtest.New(5).ESRGAN(archtest.RRDB{Features: 8, Growth: 4, Blocks: 1, In: 12, Out: 3, Ups: 2}).D)
	defer g.Close()
	if g.Halo()%2 != 0 || g.align != 2 {
		t.Errorf("halo %d, alignment %d: want multiples of the unshuffle's 2", g.Halo(), g.align)
	}
	whole := make([]byte, 4*w*h*3)
	if err := g.Upscale(context.Background(), rgb, 1, w, h, whole, 0); err != nil {
		t.Fatal(err)
	}
	for _, tile := range []int{8, 14, 32} {
		tiled := make([]byte, len(whole))
		if err := g.Upscale(context.Background(), rgb, 1, w, h, tiled, tile); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tiled, whole) {
			t.Errorf("tiles of %d differ from the whole frame", tile)
		}
	}
	if err := g.Upscale(context.Background(), rgb[:39*23*3], 1, 39, 23, make([]byte, 4*39*23*3), 0); err == nil {
		t.Error("a 39x23 frame passed a pixel unshuffle by 2")
	}
	gm := &graphModel{g: g}
	if _, _, err := gm.FrameSize(model.Video{Width: 39, Height: 23}, model.Params{}); err == nil || !strings.Contains(err.Error(), "multiples of 2") {
		t.Errorf("FrameSize of a 39x23 frame: %v", err)
	}
	if _, err := gm.NewSession(context.Background(), model.Video{Width: 39, Height: 24}, model.Params{}); err == nil {
		t.Error("a session for 39x24 frames")
	}
}

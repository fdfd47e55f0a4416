package compact

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// denseGraph writes a small RRDBNet-like ncnn graph with random weights:
// two dense blocks of growth g on f features (Concat chains, Eltwise sums
// with coefficients), a residual BinaryOp, a nearest x2 upsample, an
// Eltwise product and a last convolution to RGB.
func denseGraph(f, g int, seed uint64) (string, []byte) {
	r := rand.New(rand.NewPCG(seed, 1))
	var layers []string
	var bin bytes.Buffer
	n := 0
	conv := func(in, out string, cin, cout int, leaky bool) {
		n++
		act := ""
		if leaky {
			act = " 9=2 -23310=1,2.000000e-01"
		}
		layers = append(layers, fmt.Sprintf("Convolution conv%d 1 1 %s %s 0=%d 1=3 4=1 5=1 6=%d%s", n, in, out, cout, cin*cout*9, act))
		binary.Write(&bin, binary.LittleEndian, uint32(0x01306B47))
		scale := float32(math.Sqrt(2 / float64(cin*9)))
		for i := 0; i < cin*cout*9; i++ {
			binary.Write(&bin, binary.LittleEndian, f16(scale*float32(r.NormFloat64())))
		}
		if cin*cout*9%2 == 1 {
			binary.Write(&bin, binary.LittleEndian, uint16(0))
		}
		for i := 0; i < cout; i++ {
			binary.Write(&bin, binary.LittleEndian, 0.05*float32(r.NormFloat64()))
		}
	}
	layers = append(layers, "Input in 0 1 data")
	conv("data", "a", 3, f, false)
	block := func(x, out string) {
		members := []string{x}
		for i := 1; i <= 4; i++ {
			xi := fmt.Sprintf("%s_x%d", out, i)
			in := x
			if i > 1 {
				in = fmt.Sprintf("%s_c%d", out, i-1)
			}
			conv(in, xi, f+(i-1)*g, g, true)
			members = append(members, xi)
			layers = append(layers, fmt.Sprintf("Concat %s_cat%d %d 1 %s %s_c%d 0=0", out, i, len(members), strings.Join(members, " "), out, i))
		}
		conv(out+"_c4", out+"_x5", f+4*g, f, false)
		layers = append(layers, fmt.Sprintf("Eltwise %s_sum 2 1 %s_x5 %s %s 0=1 -23301=2,2.000000e-01,1.000000e+00", out, out, x, out))
	}
	block("a", "r1")
	block("r1", "r2")
	layers = append(layers,
		"Eltwise rr 2 1 r2 a rr 0=1 -23301=2,2.000000e-01,1.000000e+00")
	conv("rr", "body", f, f, false)
	layers = append(layers,
		"BinaryOp add 2 1 a body s 0=0",
		"Interp up 1 1 s up 0=1 1=2.000000e+00 2=2.000000e+00")
	conv("up", "u", f, f, true)
	layers = append(layers, "Eltwise prod 2 1 u u sq 0=0")
	conv("sq", "output", f, 3, false)
	param := fmt.Sprintf("7767517\n%d %d\n%s\n", len(layers), len(layers)+8, strings.Join(layers, "\n"))
	return param, bin.Bytes()
}

// f16 rounds v to IEEE half precision (normal range, round to nearest even).
func f16(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	if exp <= 0 {
		return sign // flush tiny values to zero
	}
	h := uint32(exp)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || rest == 0x1000 && h&1 == 1 {
		h++
	}
	return sign | uint16(h)
}

// TestDenseGraphFiles keeps testdata/compact/dense-*.param/.bin (which the
// GPU tests load) equal to what denseGraph makes.
// denseFiles are the dense-block graphs kept under testdata/compact
// (dense-G for growth G) for the GPU tests: growth 16 on 32 features is
// the shape of realesrgan-x4plus's blocks (multiples of 16 channels) at a
// quarter of the width.
var denseFiles = map[int][2]int{8: {12, 8}, 4: {14, 4}, 16: {32, 16}}

func TestDenseGraphFiles(t *testing.T) {
	for g, fs := range denseFiles {
		param, bin := denseGraph(fs[0], g, uint64(fs[1]))
		base := filepath.Join("..", "..", "testdata", "compact", fmt.Sprintf("dense-%d", g))
		if os.Getenv("VSR_UPDATE_TESTDATA") != "" {
			os.WriteFile(base+".param", []byte(param), 0o644)
			os.WriteFile(base+".bin", bin, 0o644)
		}
		p, err1 := os.ReadFile(base + ".param")
		b, err2 := os.ReadFile(base + ".bin")
		if err1 != nil || err2 != nil || string(p) != param || !bytes.Equal(b, bin) {
			t.Errorf("%s.param/.bin differ from denseGraph (regenerate with VSR_UPDATE_TESTDATA=1)", base)
		}
	}
}

// TestDenseGraph runs the dense-block graphs on the CPU against a direct
// float64 evaluation, checks that the Eltwise sums with coefficients were
// folded into convolutions, and that tiles give the whole frame's bytes.
func TestDenseGraph(t *testing.T) {
	b := cpu.New(0)
	for _, g := range []int{8, 4} {
		param, bin := denseGraph(16-g/2, g, uint64(g))
		m, err := LoadFiles(b, "dense", []byte(param), bin)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		folded := 0
		for _, o := range m.ops {
			if o.kind == opConv && len(o.in) == 2 {
				folded++
			}
		}
		if folded != 2 {
			t.Errorf("growth %d: %d Eltwise sums folded into convolutions, want 2", g, folded)
		}
		if n := countOps(m, opBuffer); n != 2 || countOps(m, opConcat) != 0 {
			t.Errorf("growth %d: %d dense-block buffers and %d concatenations left, want 2 and 0", g, n, countOps(m, opConcat))
		}
		rgb := randFrames(2, 19, 13, 7)
		x, err := b.FromRGB8(rgb, 2, 13, 19)
		if err != nil {
			t.Fatal(err)
		}
		y, err := m.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		if s := y.Shape(); s != (backend.Shape{N: 2, H: 26, W: 38, C: 3}) {
			t.Fatalf("output shape %v", s)
		}
		got, _ := b.Download(y)
		x.Free()
		y.Free()
		ref := naiveDense(t, param, bin, rgb, 2, 13, 19)
		if e := relErr(got, ref); e > 1e-5 || math.IsNaN(e) {
			t.Errorf("growth %d: relative error %.3g against a direct evaluation of the graph", g, e)
		} else {
			t.Logf("growth %d: relative error %.3g against a direct evaluation of the graph", g, e)
		}
		big := randFrames(1, 90, 70, 3)
		whole, tiled := make([]byte, 180*140*3), make([]byte, 180*140*3)
		if err := m.Upscale(context.Background(), big, 1, 90, 70, whole, 0); err != nil {
			t.Fatal(err)
		}
		if err := m.Upscale(context.Background(), big, 1, 90, 70, tiled, 32); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(whole, tiled) {
			t.Errorf("growth %d: tiles of 32 differ from the whole frame", g)
		}
	}
}

// countOps counts m's ops of kind k.
func countOps(m *Graph, k opKind) int {
	n := 0
	for _, o := range m.ops {
		if o.kind == k {
			n++
		}
	}
	return n
}

// TestDenseBuffers checks that the dense blocks' buffers give the bytes
// of the concatenations they replace, and that blocks whose parts are read
// elsewhere keep their concatenations.
func TestDenseBuffers(t *testing.T) {
	b := cpu.New(0)
	param, bin := denseGraph(8, 8, 8) // parts as wide as the features (see odd below)
	load := func(param string, opt Options) *Graph {
		m, err := LoadWith(b, "dense", strings.NewReader(param), bin, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	rgb := randFrames(2, 19, 13, 5)
	run := func(m *Graph) []float32 {
		x, err := b.FromRGB8(rgb, 2, 13, 19)
		_, v := forwardTensor(t, b, m, x, err)
		return v
	}
	views, copies := load(param, Options{}), load(param, Options{CopyConcat: true})
	if countOps(copies, opBuffer) != 0 || countOps(copies, opConcat) != 8 {
		t.Fatalf("CopyConcat: %d buffers, %d concatenations", countOps(copies, opBuffer), countOps(copies, opConcat))
	}
	if !slices.Equal(run(views), run(copies)) {
		t.Error("the dense-block buffers give other values than the concatenations")
	}
	// A part that a later layer also reads (r1_x2 into the residual sum)
	// keeps the first block's concatenations; the second block still
	// gets its buffer.
	odd := strings.Replace(param, "Eltwise rr 2 1 r2 a rr", "Eltwise rr 2 1 r2 r1_x2 rr", 1)
	m := load(odd, Options{})
	if countOps(m, opBuffer) != 1 || countOps(m, opConcat) != 4 {
		t.Errorf("a part read outside its block: %d buffers and %d concatenations, want 1 and 4", countOps(m, opBuffer), countOps(m, opConcat))
	}
	if !slices.Equal(run(m), run(load(odd, Options{CopyConcat: true}))) {
		t.Error("with one block kept as concatenations, the values differ")
	}
}

// naiveDense evaluates the ops denseGraph writes directly, in float64
// with loops over NCHW arrays: no backend, no fusion, no slabs.
func naiveDense(t *testing.T, param string, bin []byte, rgb []byte, n, h, w int) []float32 {
	t.Helper()
	type img struct {
		c, h, w int
		v       []float64
	}
	blobs := map[string][]img{}
	in := make([]img, n)
	for f := range in {
		in[f] = img{3, h, w, make([]float64, 3*h*w)}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				for c := 0; c < 3; c++ {
					in[f].v[(c*h+y)*w+x] = float64(rgb[((f*h+y)*w+x)*3+c]) / 255
				}
			}
		}
	}
	blobs["data"] = in
	off := 0
	half := func() float64 {
		v := binary.LittleEndian.Uint16(bin[off:])
		off += 2
		e, m := int(v>>10&0x1f), float64(v&0x3ff)
		s := 1.0
		if v&0x8000 != 0 {
			s = -1
		}
		if e == 0 {
			return s * m * math.Pow(2, -24)
		}
		return s * (1 + m/1024) * math.Pow(2, float64(e-15))
	}
	for _, line := range strings.Split(strings.TrimSpace(param), "\n")[3:] {
		fs := strings.Fields(line)
		nin, nout := 0, 0
		fmt.Sscan(fs[2], &nin)
		fmt.Sscan(fs[3], &nout)
		ins, out, args := fs[4:4+nin], fs[4+nin], fs[4+nin+nout:]
		src := blobs[ins[0]]
		res := make([]img, n)
		for f := 0; f < n; f++ {
			a := src[f]
			switch fs[0] {
			case "Convolution":
				var cout, size int
				fmt.Sscanf(args[0], "0=%d", &cout)
				fmt.Sscanf(args[4], "6=%d", &size)
				cin := size / cout / 9
				if f == 0 {
					off += 4 // the fp16 tag
				}
				start := off
				wt := make([]float64, size)
				if f == 0 {
					for i := range wt {
						wt[i] = half()
					}
					off = start + (2*size+3)/4*4
					blobs[out+"#w"] = []img{{v: wt}}
					bias := make([]float64, cout)
					for i := range bias {
						bias[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(bin[off:])))
						off += 4
					}
					blobs[out+"#b"] = []img{{v: bias}}
				}
				wt, bias := blobs[out+"#w"][0].v, blobs[out+"#b"][0].v
				o := img{cout, a.h, a.w, make([]float64, cout*a.h*a.w)}
				for k := 0; k < cout; k++ {
					for y := 0; y < a.h; y++ {
						for x := 0; x < a.w; x++ {
							s := bias[k]
							for c := 0; c < cin; c++ {
								for ky := 0; ky < 3; ky++ {
									for kx := 0; kx < 3; kx++ {
										iy, ix := y+ky-1, x+kx-1
										if iy >= 0 && iy < a.h && ix >= 0 && ix < a.w {
											s += wt[((k*cin+c)*3+ky)*3+kx] * a.v[(c*a.h+iy)*a.w+ix]
										}
									}
								}
							}
							if len(args) > 5 && s < 0 {
								s *= 0.2
							}
							o.v[(k*a.h+y)*a.w+x] = s
						}
					}
				}
				res[f] = o
			case "Concat":
				o := img{0, a.h, a.w, nil}
				for _, b := range ins {
					o.c += blobs[b][f].c
					o.v = append(o.v, blobs[b][f].v...)
				}
				res[f] = o
			case "Eltwise", "BinaryOp":
				b := blobs[ins[1]][f]
				o := img{a.c, a.h, a.w, make([]float64, len(a.v))}
				for i := range o.v {
					switch {
					case args[0] == "0=0" && fs[0] == "Eltwise":
						o.v[i] = a.v[i] * b.v[i]
					case fs[0] == "Eltwise":
						o.v[i] = 0.2*a.v[i] + b.v[i]
					default:
						o.v[i] = a.v[i] + b.v[i]
					}
				}
				res[f] = o
			case "Interp":
				o := img{a.c, 2 * a.h, 2 * a.w, make([]float64, 4*len(a.v))}
				for c := 0; c < a.c; c++ {
					for y := 0; y < o.h; y++ {
						for x := 0; x < o.w; x++ {
							o.v[(c*o.h+y)*o.w+x] = a.v[(c*a.h+y/2)*a.w+x/2]
						}
					}
				}
				res[f] = o
			default:
				t.Fatalf("naiveDense: op %s", fs[0])
			}
		}
		blobs[out] = res
	}
	if off != len(bin) {
		t.Fatalf("naiveDense read %d of %d weight bytes", off, len(bin))
	}
	var v []float32
	for _, o := range blobs["output"] {
		for y := 0; y < o.h; y++ {
			for x := 0; x < o.w; x++ {
				for c := 0; c < o.c; c++ {
					v = append(v, float32(o.v[(c*o.h+y)*o.w+x]))
				}
			}
		}
	}
	return v
}

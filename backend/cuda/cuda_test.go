package cuda

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/internal/testutil"
	"github.com/vsr-dev/vsr/model/compact"
)

// open returns a GPU backend or skips the test where there is none.
func open(t testing.TB, dt DType) *Backend {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	testutil.RequireGPU(t)
	b, err := Open("cuda:0", dt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// perOp times run on the GPU for a benchmark: one warm-up run, then bb.N
// runs between synchronizations. It returns the seconds per run.
func perOp(bb *testing.B, b *Backend, run func()) float64 {
	run()
	if err := b.Synchronize(); err != nil {
		bb.Fatal(err)
	}
	bb.ResetTimer()
	for i := 0; i < bb.N; i++ {
		run()
	}
	if err := b.Synchronize(); err != nil {
		bb.Fatal(err)
	}
	bb.StopTimer()
	return bb.Elapsed().Seconds() / float64(bb.N)
}

func randSlice(r *rand.Rand, n int, lo, hi float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = lo + (hi-lo)*r.Float32()
	}
	return s
}

var relErr = testutil.RelErr[float32]

// bound is the accepted relative error for each storage type: float32
// (cuDNN without TF32) within 1e-5 of the CPU's float32.
func bound(dt DType) float64 {
	return [...]float64{F16: 3e-3, BF16: 2e-2, F32: 1e-5}[dt]
}

// allTypes are the storage types the conformance tests run in.
var allTypes = []DType{F16, BF16, F32}

// both runs f on the CPU and the GPU backend and compares the results.
func both(t *testing.T, dt DType, name string, f func(b backend.Backend) (backend.Tensor, error)) {
	t.Helper()
	g := open(t, dt)
	g.fusedMin = 0 // the fused convolutions at the tests' small sizes too
	c := cpu.New(0)
	want, err := f(c)
	if err != nil {
		t.Fatalf("%s on cpu: %v", name, err)
	}
	got, err := f(g)
	if err != nil {
		t.Fatalf("%s on %v: %v", name, dt, err)
	}
	if got.Shape() != want.Shape() {
		t.Fatalf("%s: shape %v, cpu %v", name, got.Shape(), want.Shape())
	}
	gv, err := g.Download(got)
	if err != nil {
		t.Fatal(err)
	}
	cv, _ := c.Download(want)
	e := relErr(gv, cv)
	if e > bound(dt) || math.IsNaN(e) {
		t.Errorf("%s %v: relative error %.3g > %.3g", name, dt, e, bound(dt))
	} else {
		t.Logf("%s %v: relative error %.3g", name, dt, e)
	}
}

func TestOpsAgainstCPU(t *testing.T) {
	for _, dt := range allTypes {
		r := rand.New(rand.NewPCG(1, uint64(dt)))
		s := backend.Shape{N: 2, H: 19, W: 23, C: 64}
		x := randSlice(r, s.Elems(), -1, 1)
		y := randSlice(r, s.Elems(), -1, 1)
		in3 := backend.Shape{N: 2, H: 19, W: 23, C: 3}
		x3 := randSlice(r, in3.Elems(), 0, 1)
		w := randSlice(r, 64*64*9, -0.06, 0.06)
		w3 := randSlice(r, 48*64*9, -0.06, 0.06)
		wFirst := randSlice(r, 64*3*9, -0.3, 0.3)
		bias := randSlice(r, 64, -0.1, 0.1)
		slope := randSlice(r, 64, 0, 0.3)
		p := backend.ConvParams{KH: 3, KW: 3, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1, PadT: 1, PadL: 1, PadB: 1, PadR: 1}
		up := func(b backend.Backend, s backend.Shape, v []float32) backend.Tensor {
			tt, err := b.Upload(s, v)
			if err != nil {
				t.Fatal(err)
			}
			return tt
		}
		prelu := func(b backend.Backend) backend.Activation {
			return backend.Activation{Kind: backend.ActPReLU, Slope: up(b, backend.Shape{N: 1, H: 1, W: 1, C: 64}, slope)}
		}
		both(t, dt, "conv3x3 64->64 +bias +prelu", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(64, 64, 3, 3, w, bias)
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, s, x), cw, p, prelu(b))
		})
		// fp16: the fused kernel through the filter padded to 16 inputs
		// (canFuseSmall), with and without an activation.
		both(t, dt, "conv3x3 3->64 +bias", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(64, 3, 3, 3, wFirst, bias)
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, in3, x3), cw, p, backend.Activation{})
		})
		both(t, dt, "conv3x3 3->64 +bias +relu", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(64, 3, 3, 3, wFirst, bias)
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, in3, x3), cw, p, backend.Activation{Kind: backend.ActReLU})
		})
		both(t, dt, "conv3x3 64->48 no bias", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(48, 64, 3, 3, w3, nil)
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, s, x), cw, p, backend.Activation{})
		})
		// 1x1: one GEMM in fp16 (conv1x1), cuDNN in bf16 and f32.
		p1 := backend.ConvParams{KH: 1, KW: 1, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1}
		both(t, dt, "conv1x1 64->48 +bias +leaky", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(48, 64, 1, 1, w[:48*64], bias[:48])
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, s, x), cw, p1, backend.Activation{Kind: backend.ActLeaky, Alpha: 0.1})
		})
		// 3x3 with few outputs: in fp16 a GEMM of the taps and tap_sum (convTaps).
		s200 := backend.Shape{N: 2, H: 19, W: 23, C: 200}
		x200, w200 := randSlice(r, s200.Elems(), -1, 1), randSlice(r, 16*200*9, -0.03, 0.03)
		both(t, dt, "conv3x3 200->16 +bias +leaky", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(16, 200, 3, 3, w200, bias[:16])
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, s200, x200), cw, p, backend.Activation{Kind: backend.ActLeaky, Alpha: 0.1})
		})
		// A dense block's convolution: a channel prefix into a slice of
		// the same tensor (fp16: the fused kernel's dense-block build;
		// bf16 and f32 through copies), and at an offset the kernel's
		// 16-byte stores cannot take (copies in every type).
		wSlice := randSlice(r, 32*160*9, -0.03, 0.03)
		both(t, dt, "slice conv 160 of 200 -> 32 at 168 +bias +leaky, in place", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(32, 160, 3, 3, wSlice, bias[:32])
			if err != nil {
				return nil, err
			}
			xt := up(b, s200, x200)
			return xt, b.(backend.SliceConver).SliceConv(xt, cw, p, backend.Activation{Kind: backend.ActLeaky, Alpha: 0.2}, xt, 168)
		})
		both(t, dt, "slice conv 64 of 200 -> 16 at 4 +bias", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(16, 64, 3, 3, wSlice[:16*64*9], bias[:16])
			if err != nil {
				return nil, err
			}
			yt := up(b, backend.Shape{N: 2, H: 19, W: 23, C: 24}, make([]float32, 2*19*23*24))
			return yt, b.(backend.SliceConver).SliceConv(up(b, s200, x200), cw, p, backend.Activation{}, yt, 4)
		})
		both(t, dt, "conv1x1 3->16 +bias +relu (padded inputs)", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(16, 3, 1, 1, wFirst[:16*3], bias[:16])
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, in3, x3), cw, p1, backend.Activation{Kind: backend.ActReLU})
		})
		both(t, dt, "conv1x1 64->12 +bias (padded outputs)", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(12, 64, 1, 1, w[:12*64], bias[:12])
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, s, x), cw, p1, backend.Activation{})
		})
		both(t, dt, "conv1x1 64->16 no bias", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(16, 64, 1, 1, w[:16*64], nil)
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, s, x), cw, p1, backend.Activation{})
		})
		both(t, dt, "prelu", func(b backend.Backend) (backend.Tensor, error) {
			return b.Activate(up(b, s, x), prelu(b))
		})
		both(t, dt, "leaky", func(b backend.Backend) (backend.Tensor, error) {
			return b.Activate(up(b, s, x), backend.Activation{Kind: backend.ActLeaky, Alpha: 0.2})
		})
		for _, order := range []backend.ShuffleOrder{backend.ShuffleCRD, backend.ShuffleDCR} {
			both(t, dt, "pixel shuffle", func(b backend.Backend) (backend.Tensor, error) {
				return b.PixelShuffle(up(b, s, x), 4, order)
			})
		}
		for _, op := range []backend.BinaryOp{backend.OpAdd, backend.OpSub, backend.OpMul} {
			both(t, dt, "binary", func(b backend.Backend) (backend.Tensor, error) {
				return b.Binary(op, up(b, s, x), up(b, s, y))
			})
		}
		for _, act := range []backend.Activation{
			{Kind: backend.ActSoftClamp, Alpha: 0.5},
			{Kind: backend.ActSiLU},
			{Kind: backend.ActSigmoid},
			{Kind: backend.ActAddScalar, Alpha: -0.5},
			{Kind: backend.ActMulScalar, Alpha: 255},
			{Kind: backend.ActMish},
		} {
			both(t, dt, fmt.Sprintf("activation %d", act.Kind), func(b backend.Backend) (backend.Tensor, error) {
				return b.Activate(up(b, s, x), act)
			})
		}
		both(t, dt, "conv3x3 64->64 +bias +silu", func(b backend.Backend) (backend.Tensor, error) {
			cw, err := b.PrepareConv(64, 64, 3, 3, w, bias)
			if err != nil {
				return nil, err
			}
			return b.Conv2D(up(b, s, x), cw, p, backend.Activation{Kind: backend.ActSiLU})
		})
		both(t, dt, "pixel unshuffle", func(b backend.Backend) (backend.Tensor, error) {
			return b.PixelUnshuffle(up(b, backend.Shape{N: 2, H: 18, W: 22, C: 3}, x3[:2*18*22*3]), 2)
		})
		both(t, dt, "crop/pad", func(b backend.Backend) (backend.Tensor, error) {
			return b.CropPad(up(b, s, x), 32, 16)
		})
		for _, pad := range [][5]int{{3, 2, 1, 4, int(backend.PadReflect)}, {0, 1, 0, 1, int(backend.PadZero)}, {-4, -4, -3, -2, int(backend.PadZero)}, {2, -1, -2, 1, int(backend.PadReflect)}} {
			both(t, dt, fmt.Sprintf("pad %v", pad), func(b backend.Backend) (backend.Tensor, error) {
				return b.(backend.UNet).Pad(up(b, s, x), pad[0], pad[1], pad[2], pad[3], backend.PadMode(pad[4]))
			})
		}
		affine := func(b backend.Backend) (backend.Tensor, backend.Tensor) {
			return up(b, backend.Shape{N: 1, H: 1, W: 1, C: s.C}, bias), up(b, backend.Shape{N: 1, H: 1, W: 1, C: s.C}, x[:s.C])
		}
		both(t, dt, "group norm", func(b backend.Backend) (backend.Tensor, error) {
			a, c := affine(b)
			return b.(backend.Norm).GroupNorm(up(b, s, x), 4, a, c, 1e-5, nil)
		})
		// 4 groups of 16 and 8 of 8 channels run 8 channels a thread, 16
		// groups of 4 the scalar kernels; x+3 has a mean far from 0.
		shifted := make([]float32, len(x))
		for i, v := range x {
			shifted[i] = v + 3
		}
		for _, groups := range []int{4, 8, 16} {
			both(t, dt, fmt.Sprintf("group norm, %d groups, + residual", groups), func(b backend.Backend) (backend.Tensor, error) {
				a, c := affine(b)
				return b.(backend.Norm).GroupNorm(up(b, s, shifted), groups, a, c, 1e-5, up(b, s, y))
			})
		}
		both(t, dt, "channel norm", func(b backend.Backend) (backend.Tensor, error) {
			a, c := affine(b)
			return b.(backend.Norm).ChannelNorm(up(b, s, x), a, c, 1e-6)
		})
		both(t, dt, "channel mean", func(b backend.Backend) (backend.Tensor, error) {
			return b.(backend.UNet).ChannelMean(up(b, s, x))
		})
		both(t, dt, "squeeze-excitation gate", func(b backend.Backend) (backend.Tensor, error) {
			u := b.(backend.UNet)
			xt := up(b, s, x)
			m, err := u.ChannelMean(xt)
			if err != nil {
				return nil, err
			}
			g, err := b.Activate(m, backend.Activation{Kind: backend.ActSigmoid})
			if err != nil {
				return nil, err
			}
			return u.ScaleChannels(xt, g)
		})
		both(t, dt, "frames+concat", func(b backend.Backend) (backend.Tensor, error) {
			xt := up(b, s, x)
			f1, _ := b.Frames(xt, 1, 1)
			return b.ConcatFrames(f1, xt)
		})
		both(t, dt, "empty+copyframes", func(b backend.Backend) (backend.Tensor, error) {
			out, err := b.Empty(backend.Shape{N: 3, H: s.H, W: s.W, C: s.C})
			if err != nil {
				return nil, err
			}
			f1, _ := b.Frames(up(b, s, y), 1, 1)
			if err := b.CopyFrames(out, 0, f1); err != nil {
				return nil, err
			}
			if err := b.CopyFrames(out, 3, f1); err == nil {
				return nil, fmt.Errorf("copy past the end accepted")
			}
			return out, b.CopyFrames(out, 1, up(b, s, x))
		})
		// Channel ranges and row bands, 16 bytes at a time and not.
		for _, at := range []int{8, 3} {
			both(t, dt, "channels", func(b backend.Backend) (backend.Tensor, error) {
				return b.Channels(up(b, s, x), at, 40)
			})
			both(t, dt, "band+copyband", func(b backend.Backend) (backend.Tensor, error) {
				band, err := b.Band(up(b, s, x), at, 7)
				if err != nil {
					return nil, err
				}
				out := up(b, s, y)
				return out, b.CopyBand(out, at+4, band)
			})
		}
		both(t, dt, "band past the top and the bottom", func(b backend.Backend) (backend.Tensor, error) {
			top, err := b.Band(up(b, s, x), -2, 6)
			if err != nil {
				return nil, err
			}
			bottom, err := b.Band(up(b, s, y), s.H-3, 6)
			if err != nil {
				return nil, err
			}
			return b.ConcatFrames(top, bottom)
		})
		both(t, dt, "channels+copychannels", func(b backend.Backend) (backend.Tensor, error) {
			part, err := b.Channels(up(b, s, x), 16, 16)
			if err != nil {
				return nil, err
			}
			out := up(b, s, y)
			return out, b.CopyChannels(out, 40, part)
		})
		both(t, dt, "concat prev", func(b backend.Backend) (backend.Tensor, error) {
			xt := up(b, s, x)
			prev, _ := b.Frames(up(b, s, y), 1, 1)
			return b.ConcatPrev(xt, prev)
		})
		both(t, dt, "concat prev (zeros)", func(b backend.Backend) (backend.Tensor, error) {
			return b.ConcatPrev(up(b, s, x), nil)
		})
		both(t, dt, "fold+unfold", func(b backend.Backend) (backend.Tensor, error) {
			f, err := b.FoldFrames(up(b, s, x), 2)
			if err != nil {
				return nil, err
			}
			return b.UnfoldFrames(f, 4)
		})
		for _, mode := range []backend.ResizeMode{backend.Nearest, backend.Bilinear, backend.Bicubic} {
			both(t, dt, "resize "+mode.String()+" x4", func(b backend.Backend) (backend.Tensor, error) {
				return b.Resize(up(b, in3, x3), mode, 19*4, 23*4, backend.Tile{}, backend.Tile{})
			})
			both(t, dt, "resize "+mode.String()+" x0.75 tile", func(b backend.Backend) (backend.Tensor, error) {
				return b.Resize(up(b, in3, x3), mode, 12, 15, backend.Tile{FullH: 40, FullW: 44, Y: 8, X: 4}, backend.Tile{FullH: 30, FullW: 33, Y: 6, X: 3})
			})
		}
	}
}

// TestYUVKernel checks the GPU yuv420p conversion against the Go
// reference byte for byte.
func TestYUVKernel(t *testing.T) {
	b := open(t, F16)
	r := rand.New(rand.NewPCG(3, 3))
	n, w, h := 2, 38, 22
	rgb := make([]byte, n*w*h*3)
	for i := range rgb {
		rgb[i] = byte(r.IntN(256))
	}
	want := make([]byte, n*backend.YUV420P.FrameBytes(w, h))
	if err := backend.RGBToYUV(want, rgb, backend.YUV420P, n, w, h); err != nil {
		t.Fatal(err)
	}
	slot, err := b.NewSlot(len(rgb), len(rgb))
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Free()
	copy(slot.In(), rgb)
	x, err := slot.Input(n, h, w, backend.RGB24)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Output(slot, x, backend.YUV420P); err != nil {
		t.Fatal(err)
	}
	if err := slot.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := slot.Out(); !bytes.Equal(got, want) {
		diff := 0
		for i := range got {
			if got[i] != want[i] {
				diff++
			}
		}
		t.Errorf("yuv420p differs from the Go reference in %d of %d bytes", diff, len(want))
	}
	// RGB24 out through the same slot gives the input back (v/255 in fp16
	// rounds back to v).
	if _, err := backend.Output(slot, x, backend.RGB24); err != nil {
		t.Fatal(err)
	}
	slot.Wait()
	if !bytes.Equal(slot.Out(), rgb) {
		t.Error("rgb24 round trip through fp16 changed bytes")
	}
}

func loadPair(t *testing.T, b backend.Backend, scale int, opt compact.Options) *compact.Graph {
	t.Helper()
	param, err := os.ReadFile("../../assets/realesr-animevideov3/realesr-animevideov3-x" + string(rune('0'+scale)) + ".param")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile("../../assets/realesr-animevideov3/realesr-animevideov3-x4.bin")
	if err != nil {
		t.Fatal(err)
	}
	m, err := compact.LoadWith(b, "test", bytes.NewReader(param), bin, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestModelAgainstCPU runs the bundled model on real frames on the GPU and
// the CPU, compares the float outputs, and checks that the fused tail
// gives bitwise the same frames as the unfused ops.
func TestModelAgainstCPU(t *testing.T) {
	for _, dt := range allTypes {
		g := open(t, dt)
		g.fusedMin = 0 // the fused convolutions on this small frame too
		c := cpu.New(0)
		rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
		if err != nil {
			t.Fatal(err)
		}
		for _, scale := range []int{2, 3, 4} {
			mg := loadPair(t, g, scale, compact.Options{})
			mu := loadPair(t, g, scale, compact.Options{SeparateTail: true})
			mc := loadPair(t, c, scale, compact.Options{})
			run := func(b backend.Backend, m *compact.Graph) []float32 {
				x, err := b.FromRGB8(rgb, 1, 32, 48)
				if err != nil {
					t.Fatal(err)
				}
				y, err := m.Forward(x)
				if err != nil {
					t.Fatal(err)
				}
				v, err := b.Download(y)
				if err != nil {
					t.Fatal(err)
				}
				x.Free()
				y.Free()
				return v
			}
			want, got := run(c, mc), run(g, mg)
			e := relErr(got, want)
			if e > bound(dt) {
				t.Errorf("x%d %v: model relative error %.3g", scale, dt, e)
			} else {
				t.Logf("x%d %v: model relative error %.3g vs CPU float32", scale, dt, e)
			}
			fused, unfused := frames(t, g, mg, rgb), frames(t, g, mu, rgb)
			if !bytes.Equal(fused, unfused) {
				t.Errorf("x%d %v: fused shuffle-add frames differ from unfused", scale, dt)
			}
		}
	}
}

// frames runs the model through a Slot to yuv420p.
func frames(t *testing.T, b *Backend, m *compact.Graph, rgb []byte) []byte {
	r := compact.Engine{M: m}
	bt, err := r.NewBatch(1, 48, 32, backend.RGB24, backend.YUV420P)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Free()
	copy(bt.In(), rgb)
	if err := r.Start(context.Background(), bt, 1); err != nil {
		t.Fatal(err)
	}
	if err := bt.Wait(); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), bt.Out()...)
}

// TestF32RefusesTransformer checks that float32 storage refuses the
// transformer ops clearly instead of running kernels it has no build of.
func TestF32RefusesTransformer(t *testing.T) {
	b := open(t, F32)
	_, err := b.PrepareLinear(8, 8, make([]float32, 64), nil)
	if err == nil || !strings.Contains(err.Error(), "f16 or bf16, not f32") {
		t.Fatalf("PrepareLinear on f32: %v", err)
	}
}

// TestOutOfMemory asks for more memory than the GPU has and expects a
// clear error, with the backend still working afterwards.
func TestOutOfMemory(t *testing.T) {
	b := open(t, F16)
	_, err := b.alloc(backend.Shape{N: 1 << 10, H: 1 << 10, W: 1 << 10, C: 1 << 8})
	if err == nil || !strings.Contains(err.Error(), "GPU out of memory") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("huge alloc: %v", err)
	}
	t.Log(err)
	x, err := b.Upload(backend.Shape{N: 1, H: 1, W: 2, C: 1}, []float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := b.Download(x); err != nil || v[1] != 2 {
		t.Fatalf("after OOM: %v %v", v, err)
	}
}

func TestSizeClass(t *testing.T) {
	prev := int64(0)
	for _, n := range []int64{1, 511, 512, 513, 1 << 20, 1<<20 + 1, 3 << 20, 5<<20 + 7, 1 << 30, 1<<30 + 1} {
		c := sizeClass(n)
		if c < n || c%512 != 0 || (n > 1<<20 && float64(c) > 1.25*float64(n)) || (n <= 1<<20 && c-n >= 512) || c < prev {
			t.Errorf("sizeClass(%d) = %d", n, c)
		}
		prev = c
	}
	if sizeClass(5<<20+7) != sizeClass(5<<20+100) {
		t.Error("nearby sizes do not share a class")
	}
}

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// conv3 is a 3x3 convolution with zero padding 1 and stride 1.
var conv3 = backend.ConvParams{KH: 3, KW: 3, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1, PadT: 1, PadL: 1, PadB: 1, PadR: 1}

// TestPaddedConvAgainstCPU checks convolutions whose channel counts are not
// multiples of 8 (ReAE's first and last layers: 12 -> 64 and 64 -> 12),
// padded for cuDNN and not, against the CPU backend.
func TestPaddedConvAgainstCPU(t *testing.T) {
	for _, dt := range []DType{F16, BF16} {
		for _, pad := range []bool{true, false} {
			r := rand.New(rand.NewPCG(3, uint64(dt)))
			for _, c := range []struct{ in, out int }{{12, 64}, {64, 12}, {12, 12}, {3, 16}} {
				s := backend.Shape{N: 2, H: 17, W: 21, C: c.in}
				x := randSlice(r, s.Elems(), -1, 1)
				w := randSlice(r, c.out*c.in*9, -0.2, 0.2)
				bias := randSlice(r, c.out, -0.1, 0.1)
				name := fmt.Sprintf("conv3x3 %d->%d", c.in, c.out)
				if !pad {
					name += " unpadded"
				}
				both(t, dt, name, func(b backend.Backend) (backend.Tensor, error) {
					if g, ok := b.(*Backend); ok {
						g.noChannelPad = !pad
					}
					cw, err := b.PrepareConv(c.out, c.in, 3, 3, w, bias)
					if err != nil {
						return nil, err
					}
					xt, err := b.Upload(s, x)
					if err != nil {
						return nil, err
					}
					return b.Conv2D(xt, cw, conv3, backend.Activation{Kind: backend.ActReLU})
				})
			}
		}
	}
}

// TestConvAddAgainstCPU checks Conv2DAdd (a residual before the
// activation), through cuDNN's fused epilogue and through separate passes,
// against the CPU backend.
func TestConvAddAgainstCPU(t *testing.T) {
	for _, dt := range []DType{F16, BF16} {
		for _, cfg := range []struct {
			in, out int
			fuse    bool
		}{{32, 32, true}, {32, 32, false}, {12, 32, true}, {12, 12, true}} {
			fuse := cfg.fuse
			r := rand.New(rand.NewPCG(5, uint64(dt)))
			// Large enough for the fused epilogue (minFusedPixels).
			s := backend.Shape{N: 2, H: 128, W: 256, C: cfg.in}
			ys := backend.Shape{N: 2, H: 128, W: 256, C: cfg.out}
			x, res := randSlice(r, s.Elems(), -1, 1), randSlice(r, ys.Elems(), -1, 1)
			w := randSlice(r, cfg.out*cfg.in*9, -0.1, 0.1)
			bias := randSlice(r, cfg.out, -0.1, 0.1)
			for _, c := range []struct {
				name string
				bias []float32
				act  backend.Activation
			}{
				{"bias+res+relu", bias, backend.Activation{Kind: backend.ActReLU}},
				{"res+relu", nil, backend.Activation{Kind: backend.ActReLU}},
				{"bias+res", bias, backend.Activation{}},
				{"bias+res+leaky", bias, backend.Activation{Kind: backend.ActLeaky, Alpha: 0.2}},
			} {
				name := fmt.Sprintf("conv %d->%d +%s", cfg.in, cfg.out, c.name)
				if !fuse {
					name += " (passes)"
				}
				both(t, dt, name, func(b backend.Backend) (backend.Tensor, error) {
					if g, ok := b.(*Backend); ok {
						g.noConvFusion = !fuse
					}
					cw, err := b.PrepareConv(cfg.out, cfg.in, 3, 3, w, c.bias)
					if err != nil {
						return nil, err
					}
					xt, err := b.Upload(s, x)
					if err != nil {
						return nil, err
					}
					rt, err := b.Upload(ys, res)
					if err != nil {
						return nil, err
					}
					return b.Conv2DAdd(xt, cw, conv3, c.act, rt)
				})
			}
		}
	}
}

// TestMovesVectorEqualsScalar checks that the data-movement kernels that
// copy 8 values at a time, and the per-pixel ones for few channels, give
// bitwise the result of the kernels that move one value per thread.
func TestMovesVectorEqualsScalar(t *testing.T) {
	b := open(t, BF16)
	up := uploader(t, b, rand.New(rand.NewPCG(4, 4)))
	s := backend.Shape{N: 4, H: 9, W: 13, C: 24}
	x, prev := up(s), up(backend.Shape{N: 1, H: s.H, W: s.W, C: s.C})
	x3, x12 := up(backend.Shape{N: 2, H: 10, W: 14, C: 3}), up(backend.Shape{N: 2, H: 5, W: 7, C: 12})
	for _, c := range []struct {
		name string
		op   func() (backend.Tensor, error)
	}{
		{"concat prev", func() (backend.Tensor, error) { return b.ConcatPrev(x, prev) }},
		{"concat prev (zeros)", func() (backend.Tensor, error) { return b.ConcatPrev(x, nil) }},
		{"fold 2", func() (backend.Tensor, error) { return b.FoldFrames(x, 2) }},
		{"fold 4", func() (backend.Tensor, error) { return b.FoldFrames(x, 4) }},
		{"unfold 3", func() (backend.Tensor, error) { return b.UnfoldFrames(x, 3) }},
		{"nearest x2", func() (backend.Tensor, error) {
			return b.Resize(x, backend.Nearest, 2*s.H, 2*s.W, backend.Tile{}, backend.Tile{})
		}},
		{"nearest tile", func() (backend.Tensor, error) {
			return b.Resize(x, backend.Nearest, 7, 20, backend.Tile{FullH: 20, FullW: 30, Y: 4, X: 6}, backend.Tile{FullH: 30, FullW: 45, Y: 5, X: 8})
		}},
		{"bilinear x4, 3 channels", func() (backend.Tensor, error) {
			return b.Resize(x3, backend.Bilinear, 40, 56, backend.Tile{}, backend.Tile{})
		}},
		{"bicubic tile, 3 channels", func() (backend.Tensor, error) {
			return b.Resize(x3, backend.Bicubic, 7, 9, backend.Tile{FullH: 20, FullW: 28, Y: 2, X: 4}, backend.Tile{FullH: 14, FullW: 19, Y: 3, X: 5})
		}},
		{"pixel unshuffle, 3 channels", func() (backend.Tensor, error) { return b.PixelUnshuffle(x3, 2) }},
		{"pixel shuffle CRD, 12 channels", func() (backend.Tensor, error) { return b.PixelShuffle(x12, 2, backend.ShuffleCRD) }},
		{"pixel shuffle DCR, 12 channels", func() (backend.Tensor, error) { return b.PixelShuffle(x12, 2, backend.ShuffleDCR) }},
	} {
		var got [2][]float32
		for i, scalar := range []bool{true, false} {
			b.scalarMoves = scalar
			y, err := c.op()
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got[i], err = b.Download(y); err != nil {
				t.Fatal(err)
			}
			y.Free()
		}
		b.scalarMoves = false
		if len(got[0]) != len(got[1]) {
			t.Fatalf("%s: %d values against %d", c.name, len(got[1]), len(got[0]))
		}
		for i := range got[0] {
			if got[0][i] != got[1][i] {
				t.Fatalf("%s: value %d is %v, scalar kernel %v", c.name, i, got[1][i], got[0][i])
			}
		}
	}
}

// BenchmarkReAEOps times the ReAE's data-movement ops and convolutions at
// 2560x1440 output (bf16), each the new way and the old: the vectorised
// kernels against the scalar ones, padded channels against unpadded, and
// cuDNN's fused bias/residual/ReLU against separate passes.
func BenchmarkReAEOps(bb *testing.B) {
	b := open(bb, BF16)
	r := rand.New(rand.NewPCG(7, 8))
	up := uploader(bb, b, r)
	prep := func(out, in int) backend.Weights {
		w, err := b.PrepareConv(out, in, 3, 3, randSlice(r, out*in*9, -0.1, 0.1), randSlice(r, out, -0.1, 0.1))
		if err != nil {
			bb.Fatal(err)
		}
		return w
	}
	half := backend.Shape{N: 1, H: 360, W: 640, C: 128}
	x128, x2, x4 := up(half), up(backend.Shape{N: 2, H: 360, W: 640, C: 128}), up(backend.Shape{N: 4, H: 360, W: 640, C: 64})
	x64 := up(backend.Shape{N: 1, H: 720, W: 1280, C: 64})
	x256 := up(backend.Shape{N: 2, H: 360, W: 640, C: 256})
	w256to128, w128 := prep(128, 256), prep(128, 128)
	x12 := up(backend.Shape{N: 4, H: 720, W: 1280, C: 12})
	in3, big3 := up(backend.Shape{N: 4, H: 360, W: 640, C: 3}), up(backend.Shape{N: 4, H: 1440, W: 2560, C: 3})
	w64to12, w12to64 := prep(12, 64), prep(64, 12)
	relu := backend.Activation{Kind: backend.ActReLU}
	for _, c := range []struct {
		name string
		gb   float64 // traffic, 0 for convolutions
		run  func() (backend.Tensor, error)
	}{
		{"nearest-x2-128ch", 5 * float64(half.Elems()) * 2 / 1e9, func() (backend.Tensor, error) {
			return b.Resize(x128, backend.Nearest, 720, 1280, backend.Tile{}, backend.Tile{})
		}},
		{"concat-prev-128ch-2f", 6 * float64(half.Elems()) * 2 / 1e9, func() (backend.Tensor, error) { return b.ConcatPrev(x2, x128) }},
		{"fold-2-64ch-4f", 2 * float64(x4.Shape().Elems()) * 2 / 1e9, func() (backend.Tensor, error) { return b.FoldFrames(x4, 2) }},
		{"unfold-2-128ch-2f", 4 * float64(x2.Shape().Elems()) * 2 / 1e9, func() (backend.Tensor, error) { return b.UnfoldFrames(x2, 2) }},
		{"bilinear-x4-3ch-4f", 17 * float64(in3.Shape().Elems()) * 2 / 1e9, func() (backend.Tensor, error) {
			return b.Resize(in3, backend.Bilinear, 1440, 2560, backend.Tile{}, backend.Tile{})
		}},
		{"unshuffle-2-3ch-4f", 2 * float64(big3.Shape().Elems()) * 2 / 1e9, func() (backend.Tensor, error) { return b.PixelUnshuffle(big3, 2) }},
		{"shuffle-2-12ch-4f", 2 * float64(x12.Shape().Elems()) * 2 / 1e9, func() (backend.Tensor, error) { return b.PixelShuffle(x12, 2, backend.ShuffleCRD) }},
		{"conv-64to12-1f", 0, func() (backend.Tensor, error) { return b.Conv2D(x64, w64to12, conv3, backend.Activation{}) }},
		{"conv-12to64-4f", 0, func() (backend.Tensor, error) { return b.Conv2D(x12, w12to64, conv3, relu) }},
		{"memblock-a-256to128-relu-2f", 0, func() (backend.Tensor, error) { return b.Conv2D(x256, w256to128, conv3, relu) }},
		{"memblock-b-128-relu-2f", 0, func() (backend.Tensor, error) { return b.Conv2D(x2, w128, conv3, relu) }},
		{"memblock-c-128-res-relu-2f", 0, func() (backend.Tensor, error) { return b.Conv2DAdd(x2, w128, conv3, relu, x2) }},
	} {
		for _, base := range []bool{false, true} {
			name := c.name + "/new"
			if base {
				name = c.name + "/old"
			}
			bb.Run(name, func(bb *testing.B) {
				b.scalarMoves, b.noChannelPad, b.noConvFusion = base, base, base
				defer func() { b.scalarMoves, b.noChannelPad, b.noConvFusion = false, false, false }()
				run := func() {
					y, err := c.run()
					if err != nil {
						bb.Fatal(err)
					}
					y.Free()
				}
				sec := perOp(bb, b, run) // the warm-up run chooses the cuDNN algorithm
				if c.gb > 0 {
					bb.ReportMetric(c.gb/sec, "GB/s")
				}
			})
		}
	}
}

// uploader returns a function that uploads a tensor of random values in
// [-1, 1) of a given shape to b.
func uploader(tb testing.TB, b *Backend, r *rand.Rand) func(backend.Shape) backend.Tensor {
	return func(s backend.Shape) backend.Tensor {
		x, err := b.Upload(s, randSlice(r, s.Elems(), -1, 1))
		if err != nil {
			tb.Fatal(err)
		}
		return x
	}
}

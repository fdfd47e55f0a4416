package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/tensor/half"
)

// TestWideGPU: float32 tensors beside f16 and bf16 storage (backend.Wide).
// Uploads and downloads keep values exactly, conversions round as the
// host's half package does, and every op that takes float32 tensors gives
// bitwise the F32 backend's result for them; ops that do not take them
// refuse them.
func TestWideGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ref := open(t, F32)
	r := rand.New(rand.NewPCG(7, 8))
	s := backend.Shape{N: 2, H: 9, W: 14, C: 6}
	v := randSlice(r, s.Elems(), -3, 3)
	plane := backend.Shape{N: 1, H: 24, W: 32, C: 1}
	cur, prev := randSlice(r, plane.Elems(), 0, 255), randSlice(r, plane.Elems(), 0, 255)
	for _, dt := range []DType{F16, BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			b := open(t, dt)
			w := backend.WideOf(b)
			if w == nil {
				t.Fatal("WideOf: nil for a half-precision backend")
			}
			x := must(t)(w.UploadF32(s, v))
			if !w.IsF32(x) || !slices.Equal(got(t, b, x), v) {
				t.Fatal("UploadF32 + Download does not give the values back")
			}
			// Conversions.
			n := must(t)(w.Convert(x, false))
			if w.IsF32(n) {
				t.Fatal("Convert(x, false) gave a float32 tensor")
			}
			want := make([]float32, len(v))
			for i, f := range v {
				if dt == F16 {
					want[i] = half.FromF16(half.ToF16(f))
				} else {
					want[i] = half.FromBF16(half.ToBF16(f))
				}
			}
			if !slices.Equal(got(t, b, n), want) {
				t.Error("Convert to the storage type does not round to nearest")
			}
			if back := must(t)(w.Convert(n, true)); !w.IsF32(back) || !slices.Equal(got(t, b, back), want) {
				t.Error("Convert of storage values to float32 is not exact")
			}
			// CopyChannels into a wider float32 tensor, from both types.
			dst := must(t)(w.EmptyF32(backend.Shape{N: 2, H: 9, W: 14, C: 13}))
			if err := b.CopyChannels(dst, 1, x); err != nil {
				t.Fatal(err)
			}
			if err := b.CopyChannels(dst, 7, n); err != nil {
				t.Fatal(err)
			}
			d := got(t, b, dst)
			for p := 0; p < s.N*s.H*s.W; p++ {
				for c := 0; c < 6; c++ {
					if d[p*13+1+c] != v[p*6+c] || d[p*13+7+c] != want[p*6+c] {
						t.Fatalf("CopyChannels: pixel %d channel %d: %g %g, want %g %g", p, c, d[p*13+1+c], d[p*13+7+c], v[p*6+c], want[p*6+c])
					}
				}
			}
			// The ops that take float32 tensors, against the F32 backend.
			type op func(b backend.Backend, x, y backend.Tensor) (backend.Tensor, error)
			ops := map[string]op{
				"resize bilinear": func(b backend.Backend, x, _ backend.Tensor) (backend.Tensor, error) {
					return b.Resize(x, backend.Bilinear, 36, 56, backend.Tile{}, backend.Tile{})
				},
				"resize nearest": func(b backend.Backend, x, _ backend.Tensor) (backend.Tensor, error) {
					return b.Resize(x, backend.Nearest, 18, 28, backend.Tile{}, backend.Tile{})
				},
				"binary": func(b backend.Backend, x, y backend.Tensor) (backend.Tensor, error) {
					return b.Binary(backend.OpAdd, x, y)
				},
				"add scaled": func(b backend.Backend, x, y backend.Tensor) (backend.Tensor, error) {
					return b.AddScaled(x, 0.3, y, -1.7)
				},
				"channels": func(b backend.Backend, x, _ backend.Tensor) (backend.Tensor, error) { return b.Channels(x, 2, 3) },
				"frames":   func(b backend.Backend, x, _ backend.Tensor) (backend.Tensor, error) { return b.Frames(x, 1, 1) },
				"copy frames": func(b backend.Backend, x, y backend.Tensor) (backend.Tensor, error) {
					z, err := b.Empty(s)
					if wb := backend.WideOf(b); wb != nil {
						z, err = wb.EmptyF32(s)
					}
					if err == nil {
						err = b.CopyFrames(z, 0, x)
					}
					return z, err
				},
			}
			y2 := randSlice(r, s.Elems(), -1, 1)
			for name, f := range ops {
				run := func(b backend.Backend, up func(backend.Shape, []float32) (backend.Tensor, error)) []float32 {
					xt, yt := must(t)(up(s, v)), must(t)(up(s, y2))
					out, err := f(b, xt, yt)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if wb := backend.WideOf(b); wb != nil && !wb.IsF32(out) {
						t.Fatalf("%s: a float32 input gave a %s result", name, dt)
					}
					return got(t, b, out)
				}
				if a, e := run(b, w.UploadF32), run(ref, ref.Upload); !slices.Equal(a, e) {
					t.Errorf("%s: float32 beside %s differs from the F32 backend (relative %.3g)", name, dt, relErr(a, e))
				}
			}
			// Block matching on float32 planes gives float32 side data.
			var side [2][2][]float32
			for i, bk := range []backend.Backend{b, ref} {
				up := ref.Upload
				if i == 0 {
					up = w.UploadF32
				}
				mv, res, err := bk.(backend.Motion).MatchBlocks(must(t)(up(plane, cur)), must(t)(up(plane, prev)), 8, 6, 1.0/255)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 && (!w.IsF32(mv) || !w.IsF32(res)) {
					t.Fatal("MatchBlocks of float32 planes gave storage-type results")
				}
				side[i] = [2][]float32{got(t, bk, mv), got(t, bk, res)}
			}
			if !slices.Equal(side[0][0], side[1][0]) || !slices.Equal(side[0][1], side[1][1]) {
				t.Error("MatchBlocks of float32 planes differs from the F32 backend")
			}
			// An op that takes only the storage type refuses float32.
			if _, err := b.Activate(x, backend.Activation{Kind: backend.ActReLU}); err == nil || !strings.Contains(err.Error(), "float32 tensor given to an op that takes") {
				t.Errorf("Activate of a float32 tensor: %v, want a refusal", err)
			}
			if err := b.CopyFrames(n, 0, x); err == nil {
				t.Error("CopyFrames between types: no error")
			}
		})
	}
}

func must(t testing.TB) func(backend.Tensor, error) backend.Tensor {
	return func(x backend.Tensor, err error) backend.Tensor {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
}

func got(t *testing.T, b backend.Backend, x backend.Tensor) []float32 {
	t.Helper()
	v, err := b.Download(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStoredGPU: DownloadStored gives a tensor's stored bits (those of
// Download narrowed back, on the host's half package), UploadStored makes
// the same tensor from them, and a float32 tensor beside narrower storage
// or a wrong byte count is refused.
func TestStoredGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := rand.New(rand.NewPCG(9, 10))
	s := backend.Shape{N: 2, H: 5, W: 7, C: 3}
	v := randSlice(r, s.Elems(), -5, 5)
	for _, dt := range []DType{F16, BF16, F32} {
		t.Run(dt.String(), func(t *testing.T) {
			b := open(t, dt)
			x := must(t)(b.Upload(s, v))
			data, err := b.DownloadStored(x)
			if err != nil {
				t.Fatal(err)
			}
			vals := got(t, b, x)
			want := make([]byte, 4*len(vals))
			if dt != F32 {
				want = want[:0]
				for _, u := range half.EncodeSlice(vals, dt == BF16) {
					want = append(want, byte(u), byte(u>>8))
				}
			} else {
				for i, f := range vals {
					u := math.Float32bits(f)
					want[4*i], want[4*i+1], want[4*i+2], want[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
				}
			}
			if !slices.Equal(data, want) {
				t.Fatal("DownloadStored is not the stored values' bits")
			}
			y := must(t)(b.UploadStored(s, data))
			if !slices.Equal(got(t, b, y), vals) {
				t.Fatal("UploadStored of DownloadStored's bytes is not the same tensor")
			}
			if _, err := b.UploadStored(s, data[1:]); err == nil {
				t.Error("UploadStored took a wrong byte count")
			}
			if w := backend.WideOf(b); w != nil {
				f := must(t)(w.UploadF32(s, v))
				if _, err := b.DownloadStored(f); err == nil || !strings.Contains(err.Error(), "stores") {
					t.Errorf("DownloadStored of a float32 tensor on %v: %v", dt, err)
				}
			}
		})
	}
}

// TestMatchStagedGPU: block matching's staged search (prev's search area
// in shared memory, several candidates per thread) gives the vectors and
// residual of the unstaged search bitwise, on random planes and on a
// smooth moving one, for several blocks and ranges (one too wide to
// stage), with planes of fewer pixels than a window and uneven edges.
func TestMatchStagedGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := open(t, F32)
	r := rand.New(rand.NewPCG(3, 4))
	smooth := func(n, w, h int, dx float64) []float32 {
		v := make([]float32, n*w*h)
		for i := range v {
			x, y := float64(i%w), float64(i/w%h)
			v[i] = float32(128 + 60*math.Sin((x+dx*float64(i/(w*h)))/7) + 50*math.Cos(y/5) + 4*r.Float64())
		}
		return v
	}
	for _, c := range []struct{ w, h, bs, rng int }{{200, 120, 16, 16}, {97, 61, 8, 6}, {45, 29, 5, 3}, {20, 14, 16, 16}, {150, 100, 16, 40}} {
		plane := backend.Shape{N: 2, H: c.h, W: c.w, C: 1}
		for _, kind := range []string{"random", "smooth"} {
			cur, prev := randSlice(r, plane.Elems(), 0, 255), randSlice(r, plane.Elems(), 0, 255)
			if kind == "smooth" {
				cur, prev = smooth(2, c.w, c.h, 2.5), smooth(2, c.w, c.h, 0)
			}
			var out [2][2][]float32
			for i, off := range []bool{false, true} {
				b.noStagedMatch = off
				mv, res, err := b.MatchBlocks(must(t)(b.Upload(plane, cur)), must(t)(b.Upload(plane, prev)), c.bs, c.rng, 1.0/255)
				if err != nil {
					t.Fatal(err)
				}
				out[i] = [2][]float32{got(t, b, mv), got(t, b, res)}
			}
			b.noStagedMatch = false
			if !slices.Equal(out[0][0], out[1][0]) || !slices.Equal(out[0][1], out[1][1]) {
				t.Errorf("%+v %s: the staged search differs from the unstaged one (staged %d bytes)", c, kind, mbStagedBytes(c.w, c.h, c.bs, c.rng))
			}
		}
	}
}

// BenchmarkMatchBlocks: CDA-VSR's side data search (blocks of 16 within
// 16 pixels) on one 640x360 plane, staged and not.
func BenchmarkMatchBlocks(bb *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := open(bb, F32)
	r := rand.New(rand.NewPCG(5, 6))
	plane := backend.Shape{N: 1, H: 360, W: 640, C: 1}
	cur := must(bb)(b.Upload(plane, randSlice(r, plane.Elems(), 0, 255)))
	prev := must(bb)(b.Upload(plane, randSlice(r, plane.Elems(), 0, 255)))
	for _, off := range []bool{false, true} {
		bb.Run(fmt.Sprintf("staged=%v", !off), func(bb *testing.B) {
			b.noStagedMatch = off
			defer func() { b.noStagedMatch = false }()
			s := perOp(bb, b, func() {
				mv, res, err := b.MatchBlocks(cur, prev, 16, 16, 1.0/255)
				if err != nil {
					bb.Fatal(err)
				}
				mv.Free()
				res.Free()
			})
			bb.ReportMetric(s*1e3, "ms/plane")
		})
	}
}

// TestCopyChannels8GPU: the 8-channels-a-thread conversions between
// float32 and the storage types give the per-value kernels' bytes, for
// Convert both ways and CopyChannels into wider tensors at offsets.
func TestCopyChannels8GPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := rand.New(rand.NewPCG(9, 10))
	s := backend.Shape{N: 2, H: 5, W: 7, C: 16}
	v := randSlice(r, s.Elems(), -70000, 70000) // beyond fp16's range too
	for _, dt := range []DType{F16, BF16} {
		b := open(t, dt)
		w := backend.WideOf(b)
		var outs [2][][]float32
		for i, scalar := range []bool{false, true} {
			b.scalarMoves = scalar
			x := must(t)(w.UploadF32(s, v))
			n := must(t)(w.Convert(x, false))
			back := must(t)(w.Convert(n, true))
			wide := must(t)(w.EmptyF32(backend.Shape{N: 2, H: 5, W: 7, C: 40}))
			narrow := must(t)(b.Empty(backend.Shape{N: 2, H: 5, W: 7, C: 40}))
			for _, at := range []int{0, 8, 24} {
				if err := b.CopyChannels(wide, at, n); err != nil {
					t.Fatal(err)
				}
				if err := b.CopyChannels(narrow, at, x); err != nil {
					t.Fatal(err)
				}
			}
			outs[i] = [][]float32{got(t, b, n), got(t, b, back), got(t, b, wide)[:2*5*7*40], got(t, b, narrow)}
		}
		b.scalarMoves = false
		for k := range outs[0] {
			if !slices.Equal(outs[0][k], outs[1][k]) {
				t.Errorf("%v: result %d of the 8-channel kernels differs from the per-value ones", dt, k)
			}
		}
	}
}

// TestShuffleAddBilinearGPU: the fused tail of CDA-VSR gives the bytes of
// PixelShuffle, bilinear Resize and Binary add, in every type, with a
// float32 base beside half-precision storage, in both shuffle orders.
func TestShuffleAddBilinearGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := rand.New(rand.NewPCG(11, 12))
	xs, bs := backend.Shape{N: 2, H: 7, W: 9, C: 3 * 16}, backend.Shape{N: 2, H: 7, W: 9, C: 3}
	xv, bv := randSlice(r, xs.Elems(), -1, 1), randSlice(r, bs.Elems(), 0, 1)
	for _, dt := range []DType{F16, BF16, F32} {
		b := open(t, dt)
		w := backend.WideOf(b)
		for _, wide := range []bool{false, true} {
			if wide && w == nil {
				continue
			}
			for _, order := range []backend.ShuffleOrder{backend.ShuffleCRD, backend.ShuffleDCR} {
				x := must(t)(b.Upload(xs, xv))
				up := b.Upload
				if wide {
					up = w.UploadF32
				}
				base := must(t)(up(bs, bv))
				sh := must(t)(b.PixelShuffle(x, 4, order))
				if wide {
					sh = must(t)(w.Convert(sh, true))
				}
				bil := must(t)(b.Resize(base, backend.Bilinear, 28, 36, backend.Tile{}, backend.Tile{}))
				want := got(t, b, must(t)(b.Binary(backend.OpAdd, sh, bil)))
				y := must(t)(b.ShuffleAddBilinear(x, base, 4, order))
				if w != nil && wide != w.IsF32(y) {
					t.Errorf("%v wide=%v: the result's type does not follow the base's", dt, wide)
				}
				if g := got(t, b, y); !slices.Equal(g, want) {
					t.Errorf("%v wide=%v order %v: differs from the separate ops (relative %.3g)", dt, wide, order, relErr(g, want))
				}
			}
		}
	}
}

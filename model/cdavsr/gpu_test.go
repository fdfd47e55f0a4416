package cdavsr

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/backend/cuda"
	"github.com/vsr-dev/vsr/internal/testutil"
	"github.com/vsr-dev/vsr/model"
)

func gpu(t testing.TB, dt cuda.DType) *cuda.Backend {
	t.Helper()
	testutil.RequireGPU(t)
	g, err := cuda.Open("cuda:0", dt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// psnr of got against want, both in [0,1] scale.
func psnr(got, want []float32) float64 {
	var se float64
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		se += d * d
	}
	return 10 * math.Log10(float64(len(got))/se)
}

// TestGoldenGPU runs the golden sequence on the GPU in float32 (no TF32),
// fp16 and bf16 and compares with PyTorch's float32 outputs; the motion
// ops alone are checked against the CPU backend on random inputs, in fp16
// and float32.
func TestGoldenGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ck := synthFile(t, t.TempDir(), 4, nil, "")
	for _, dt := range []cuda.DType{cuda.F32, cuda.F16, cuda.BF16} {
		g := gpu(t, dt)
		net, err := Load(g, ck)
		if err != nil {
			t.Fatal(err)
		}
		outs := runSequence(t, g, net)
		net.Close()
		bound := [...]float64{cuda.F16: 5e-3, cuda.BF16: 3e-2, cuda.F32: 1e-5}[dt]
		for k, got := range outs {
			want := readF32(t, filepath.Join(gdir, fmt.Sprintf("out%d.f32", k)))
			e := relErr(got, want)
			if !(e < bound) {
				t.Errorf("%v step %d: relative error %.3g against PyTorch float32, want < %g", dt, k, e, bound)
			}
			t.Logf("%v step %d: relative error %.3g, PSNR %.1f dB against PyTorch float32", dt, k, e, psnr(got, want))
		}
	}
	// The motion ops against the CPU backend.
	for _, dt := range []cuda.DType{cuda.F16, cuda.F32} {
		motionAgainstCPU(t, gpu(t, dt), [...]float64{cuda.F16: 3e-3, cuda.F32: 1e-6}[dt])
	}
}

// motionAgainstCPU compares g's motion ops with the CPU backend's on
// random inputs, within relative error bound.
func motionAgainstCPU(t *testing.T, g *cuda.Backend, bound float64) {
	c := cpu.New(0)
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(n int, lo, hi float32, quarter bool) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = lo + (hi-lo)*r.Float32()
			if quarter {
				v[i] = float32(math.Round(float64(v[i]*4))) / 4
			}
		}
		return v
	}
	// 128 channels run the vectorised kernels (16 bytes a thread), 12 the
	// per-value ones.
	for _, ch := range []int{128, 12} {
		motionShape(t, c, g, rnd, backend.Shape{N: 1, H: 13, W: 21, C: ch}, bound)
	}
}

func motionShape(t *testing.T, c *cpu.Backend, g *cuda.Backend, rnd func(int, float32, float32, bool) []float32, s backend.Shape, bound float64) {
	xv, mvv, ov, wv := rnd(s.Elems(), -1, 1, false), rnd(s.N*s.H*s.W*2, -30, 30, true), rnd(s.N*s.H*s.W*12, -2, 2, false), rnd(s.N*s.H*s.W, -1, 1, false)
	// run applies f to the inputs on b, the motion field uploaded by upMV.
	run := func(name string, b backend.Backend, upMV func(backend.Shape, []float32) (backend.Tensor, error),
		f func(b backend.Backend, x, mv, o, w backend.Tensor) (backend.Tensor, error)) []float32 {
		x, _ := b.Upload(s, xv)
		mv, _ := upMV(backend.Shape{N: 1, H: s.H, W: s.W, C: 2}, mvv)
		o, _ := b.Upload(backend.Shape{N: 1, H: s.H, W: s.W, C: 12}, ov)
		w, _ := b.Upload(backend.Shape{N: 1, H: s.H, W: s.W, C: 1}, wv)
		y, err := f(b, x, mv, o, w)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, _ := b.Download(y)
		return v
	}
	both := func(name string, f func(b backend.Backend, x, mv, o, w backend.Tensor) (backend.Tensor, error)) {
		want, got := run(name, c, c.Upload, f), run(name, g, g.Upload, f)
		if e := relErr(got, want); !(e < bound) {
			t.Errorf("%s, %d channels: GPU %s against CPU: relative error %.3g, want < %g", name, s.C, g.StorageType(), e, bound)
		}
		// A float32 motion field beside half-precision storage (the
		// instance's): the same values here, so the same result bitwise.
		if w := backend.WideOf(g); w != nil {
			if v := run(name, g, w.UploadF32, f); relErr(v, got) != 0 {
				t.Errorf("%s, %d channels: a float32 motion field changes the result (relative %.3g)", name, s.C, relErr(v, got))
			}
		}
	}
	both("warp", func(b backend.Backend, x, mv, _, _ backend.Tensor) (backend.Tensor, error) {
		return b.(backend.Motion).WarpNearest(x, mv)
	})
	both("deform", func(b backend.Backend, x, mv, o, _ backend.Tensor) (backend.Tensor, error) {
		return b.(backend.Motion).DeformSample(x, o, mv, Groups, OffsetLimit)
	})
	both("gate", func(b backend.Backend, x, _, _, w backend.Tensor) (backend.Tensor, error) {
		return b.(backend.Motion).Gate(x, w, false)
	})
	both("gate sigmoid", func(b backend.Backend, x, _, _, w backend.Tensor) (backend.Tensor, error) {
		return b.(backend.Motion).Gate(x, w, true)
	})
	// The scene-cut statistic of two tensors at once.
	var means [2][]float64
	for i, b := range []backend.Backend{c, g} {
		x, _ := b.Upload(s, xv)
		w, _ := b.Upload(backend.Shape{N: 1, H: s.H, W: s.W, C: 1}, wv)
		m, err := b.(backend.Motion).MeanAbs(x, w)
		if err != nil {
			t.Fatal(err)
		}
		means[i] = m
		x.Free()
		w.Free()
	}
	for j := range means[0] {
		if e := math.Abs(means[1][j]-means[0][j]) / means[0][j]; !(e < bound) {
			t.Errorf("mean abs %d, %d channels: GPU %s %g, CPU %g", j, s.C, g.StorageType(), means[1][j], means[0][j])
		}
	}
}

// BenchmarkStepGPU times the network's P step (and I step) at 320x180 and
// 640x360 on the GPU, side data excluded: the median of 20 steps after 5,
// each step synchronised.
func BenchmarkStepGPU(bb *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ck := synthFile(bb, bb.TempDir(), 4, nil, "")
	for _, size := range [][2]int{{320, 180}, {640, 360}} {
		for _, k := range [][2]any{{cuda.F16, false}, {cuda.F16, true}, {cuda.F32, false}, {cuda.F32, true}} {
			dt, graphs := k[0].(cuda.DType), k[1].(bool)
			bb.Run(fmt.Sprintf("%dx%d/%v/graphs=%v", size[0], size[1], dt, graphs), func(bb *testing.B) {
				g := gpu(bb, dt)
				net, err := Load(g, ck)
				if err != nil {
					bb.Fatal(err)
				}
				defer net.Close()
				w, h := size[0], size[1]
				in, err := net.OpenWith(w, h, graphs)
				if err != nil {
					bb.Fatal(err)
				}
				defer in.Close()
				r := rand.New(rand.NewPCG(1, 1))
				fill := func(n int, a float32) []float32 {
					v := make([]float32, n)
					for i := range v {
						v[i] = a * r.Float32()
					}
					return v
				}
				x, _ := net.Upload(backend.Shape{N: 1, H: h, W: w, C: 3}, fill(w*h*3, 1))
				mv, _ := net.Upload(backend.Shape{N: 1, H: h, W: w, C: 2}, fill(w*h*2, 3))
				res, _ := net.Upload(backend.Shape{N: 1, H: h, W: w, C: 1}, fill(w*h, 0.05))
				timeStep := func(reset bool) time.Duration {
					st := time.Now()
					y, err := in.Step(x, mv, res, reset)
					if err != nil {
						bb.Fatal(err)
					}
					y.Free()
					if err := g.Synchronize(); err != nil {
						bb.Fatal(err)
					}
					return time.Since(st)
				}
				median := func(reset bool) float64 {
					var ds []float64
					for i := 0; i < 25; i++ {
						d := timeStep(reset)
						if i >= 5 {
							ds = append(ds, d.Seconds()*1e3)
						}
					}
					for i := range ds {
						for j := i + 1; j < len(ds); j++ {
							if ds[j] < ds[i] {
								ds[i], ds[j] = ds[j], ds[i]
							}
						}
					}
					return ds[len(ds)/2]
				}
				timeStep(true)
				p := median(false)
				i := median(true)
				bb.ReportMetric(p, "ms/P-step")
				bb.ReportMetric(i, "ms/I-step")
				// The side data (luma, block matching within 16 pixels,
				// residual) of a frame against another.
				prev, _, _, err := net.sideData(x, nil, 16)
				if err != nil {
					bb.Fatal(err)
				}
				x2, _ := net.Upload(backend.Shape{N: 1, H: h, W: w, C: 3}, fill(w*h*3, 1))
				var ds []float64
				for k := 0; k < 25; k++ {
					st := time.Now()
					l, m, rs, err := net.sideData(x2, prev, 16)
					if err != nil {
						bb.Fatal(err)
					}
					if err := g.Synchronize(); err != nil {
						bb.Fatal(err)
					}
					if k >= 5 {
						ds = append(ds, time.Since(st).Seconds()*1e3)
					}
					l.Free()
					m.Free()
					rs.Free()
				}
				sort.Float64s(ds)
				bb.ReportMetric(ds[len(ds)/2], "ms/side-data")
			})
		}
	}
}

// TestMatcherGPU is TestMatcher with the GPU's block matching (fp16
// planes).
func TestMatcherGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	testMatcher(t, gpu(t, cuda.F16), rgb, 48, 32)
}

// TestWideInstanceGPU: beside half-precision layers the instance keeps
// its inputs, output and state in float32, as CDA-VSR's reference runtime
// does, and refuses inputs of the storage type or of another backend
// before touching the state.
func TestWideInstanceGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := gpu(t, cuda.F16)
	net, err := Load(g, synthFile(t, t.TempDir(), 4, nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	in, err := net.OpenWith(gw, gh, true)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for i, st := range append(in.state[:], in.fixed[:]...) {
		if !g.IsF32(st) {
			t.Errorf("buffer %d of the instance is not float32", i)
		}
	}
	frames, mvs, ress := goldenInputs()
	half, _ := g.Upload(backend.Shape{N: 1, H: gh, W: gw, C: 3}, frames[0])
	defer half.Free()
	if _, err := in.Step(half, nil, nil, true); err == nil || !strings.Contains(err.Error(), "frame holds half-precision values; the instance takes float32") {
		t.Errorf("a frame in f16: %v, want a refusal", err)
	}
	// A frame of another backend (another context on the same GPU).
	other, _ := gpu(t, cuda.F16).UploadF32(backend.Shape{N: 1, H: gh, W: gw, C: 3}, frames[0])
	if _, err := in.Step(other, nil, nil, true); err == nil || !strings.Contains(err.Error(), "frame is not a tensor of cuda:0") {
		t.Errorf("a frame of another backend: %v, want a refusal", err)
	}
	for k := 0; k < 3; k++ {
		x, mv, res := uploadStep(net, frames[k], mvs[k], ress[k])
		y, err := in.Step(x, mv, res, false)
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		if !g.IsF32(y) {
			t.Errorf("step %d: the output is not float32", k)
		}
		for _, t := range []backend.Tensor{x, mv, res, y} {
			t.Free()
		}
	}
}

// TestGraphsGPU: the CUDA-graph variant gives the plain steps' outputs,
// bitwise, over I and P steps from both state buffers and a reset.
func TestGraphsGPU(t *testing.T) {
	for _, dt := range []cuda.DType{cuda.F16, cuda.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			g := gpu(t, dt)
			net, err := Load(g, synthFile(t, t.TempDir(), 4, nil, ""))
			if err != nil {
				t.Fatal(err)
			}
			defer net.Close()
			// I P P P, reset, P P P, reset: every path from both buffers, twice.
			reset := func(k int) bool { return k == 4 || k == 9 }
			plain, _ := goldenSteps(t, net, false, 12, reset)
			graphed, used := goldenSteps(t, net, true, 12, reset)
			if !used {
				t.Fatal("the instance did not use graphs")
			}
			for k := range plain {
				if relErr(graphed[k], plain[k]) != 0 {
					t.Errorf("step %d: graph output differs from the plain step (relative %.3g)", k, relErr(graphed[k], plain[k]))
				}
			}
		})
	}
}

// goldenSteps runs steps steps of the golden inputs (frame k mod gsteps)
// on a new instance of net (graphs as asked), resetting before the steps
// reset gives (nil: none), and returns their outputs and whether the
// instance used graphs.
func goldenSteps(t *testing.T, net *Net, graphs bool, steps int, reset func(k int) bool) ([][]float32, bool) {
	t.Helper()
	frames, mvs, ress := goldenInputs()
	in, err := net.OpenWith(gw, gh, graphs)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var outs [][]float32
	for k := 0; k < steps; k++ {
		f := k % gsteps
		x, mv, res := uploadStep(net, frames[f], mvs[f], ress[f])
		y, err := in.Step(x, mv, res, reset != nil && reset(k))
		if err != nil {
			t.Fatal(err)
		}
		v, _ := net.b.Download(y)
		outs = append(outs, v)
		for _, t := range []backend.Tensor{x, mv, res, y} {
			t.Free()
		}
	}
	return outs, in.Graphs()
}

// TestTailGPU: the fused output tail (BilinearShuffleAdder) gives the
// separate ops' outputs bitwise, in fp16 (float32 frames beside it) and
// float32, over I and P steps.
func TestTailGPU(t *testing.T) {
	for _, dt := range []cuda.DType{cuda.F16, cuda.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			g := gpu(t, dt)
			net, err := Load(g, synthFile(t, t.TempDir(), 4, nil, ""))
			if err != nil {
				t.Fatal(err)
			}
			defer net.Close()
			net.separateTail = true
			separate, _ := goldenSteps(t, net, false, gsteps, nil)
			net.separateTail = false
			fused, _ := goldenSteps(t, net, false, gsteps, nil)
			for k := range separate {
				if len(fused[k]) == 0 || relErr(fused[k], separate[k]) != 0 {
					t.Errorf("step %d: the fused tail differs from the separate ops (relative %.3g)", k, relErr(fused[k], separate[k]))
				}
			}
		})
	}
}

// TestResumeGPU is TestResume's clip on the GPU in fp16 and float32, CUDA
// graphs on: a run stopped before a forced reset and resumed in a new
// session gives the frames of the run never stopped, bit for bit, scene
// cut and all; on the same backend, and on a fresh one, as a resumed
// process would (its convolution algorithms chosen again).
func TestResumeGPU(t *testing.T) {
	ck := synthFile(t, t.TempDir(), 2, nil, "")
	rgb, v := resumeClip(t), resumeVideo()
	set := model.Values{"reset-every": 10}
	for _, dt := range []cuda.DType{cuda.F16, cuda.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			load := func() model.Model {
				m, err := family{}.Load(gpu(t, dt), ck, model.Params{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(m.Close)
				return m
			}
			m := load()
			at, _, resets := resumes(t, m, m, v, set, rgb, 4)
			if want := []int{10, 13, 20, 27, 30, 40}; !slices.Equal(at, want) {
				t.Errorf("checkpoints before frames %v, want %v", at, want)
			}
			if resets != 8 {
				t.Errorf("%d resets, want 8: 7 forced and the scene cut on frame %d", resets, rcut)
			}
			if t.Failed() {
				return
			}
			if resumes(t, m, load(), v, set, rgb, 4); t.Failed() {
				t.Error("the errors above are of sessions resumed on a fresh backend only, as in a new process: do its convolutions choose other algorithms (by timing)?")
			}
		})
	}
}

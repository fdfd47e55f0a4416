package cudnn

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

// gpuEnv is shared by the GPU tests: device 0's primary context, a stream,
// a cuDNN handle on that stream, and a Find-mode cache.
type gpuEnv struct {
	ctx    *cuda.Context
	stream *cuda.Stream
	h      *Handle
	cache  *Cache
}

var (
	envOnce sync.Once
	env     *gpuEnv
	envErr  error
)

func gpu(t *testing.T) *gpuEnv {
	t.Helper()
	envOnce.Do(func() {
		if err := Load(); err != nil {
			envErr = err
			return
		}
		n, err := cuda.DeviceCount()
		if err != nil {
			envErr = err
			return
		}
		if n == 0 {
			envErr = errors.New("no CUDA device")
			return
		}
		d, err := cuda.GetDevice(0)
		if err != nil {
			envErr = err
			return
		}
		e := &gpuEnv{}
		if e.ctx, envErr = d.PrimaryContext(); envErr != nil {
			return
		}
		if e.stream, envErr = e.ctx.NewStream(); envErr != nil {
			return
		}
		t0 := time.Now()
		if e.h, envErr = NewHandle(e.ctx); envErr != nil {
			return
		}
		if envErr = e.h.SetStream(e.stream); envErr != nil {
			return
		}
		e.cache = NewCache(e.h, Options{})
		name, _ := d.Name()
		v, _ := Version()
		t.Logf("GPU %s, cuDNN %s from %s (cudnnCreate %v)", name, VersionString(v), LibraryPath(), time.Since(t0).Round(time.Millisecond))
		env = e
	})
	if envErr != nil {
		t.Skip("no GPU or no cuDNN, skipping: " + envErr.Error())
	}
	return env
}

// devBuf allocates n bytes or fails the test; it is freed at cleanup.
func devBuf(t *testing.T, e *gpuEnv, n int) cuda.DevicePtr {
	t.Helper()
	if n == 0 {
		return 0
	}
	b, err := e.ctx.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b.Ptr()
}

type convData struct {
	x, w, bias []float64
	xr, wr, br []uint16
}

func makeData(s Shape, seed uint64) convData {
	rng := rand.New(rand.NewPCG(seed, 7))
	d := convData{x: make([]float64, s.XElems()), w: make([]float64, s.WElems()), bias: make([]float64, s.K)}
	scale := 2 / math.Sqrt(float64(s.KH*s.KW*s.C))
	for i := range d.x {
		d.x[i] = rng.Float64()*2 - 1
	}
	for i := range d.w {
		d.w[i] = (rng.Float64()*2 - 1) * scale
	}
	for i := range d.bias {
		d.bias[i] = rng.Float64()*2 - 1
	}
	d.xr = encode(s.DType, d.x)
	d.wr = encode(s.DType, d.w)
	d.br = encode(s.DType, d.bias)
	return d
}

// runConv uploads d, runs cv.Forward on e's stream and returns y.
func runConv(t *testing.T, e *gpuEnv, cv *Conv, d convData) []float64 {
	t.Helper()
	s := cv.Shape()
	x, w, y := devBuf(t, e, s.XBytes()), devBuf(t, e, s.WBytes()), devBuf(t, e, s.YBytes())
	ws := devBuf(t, e, cv.WorkspaceSize())
	must(t, e.stream.CopyHtoD(x, cuda.AsBytes(d.xr)))
	must(t, e.stream.CopyHtoD(w, cuda.AsBytes(d.wr)))
	must(t, e.stream.Memset8(y, 0xff, s.YBytes())) // NaNs if the conv writes nothing
	must(t, cv.Forward(e.h, x, w, y, ws, cv.WorkspaceSize()))
	out := make([]uint16, s.YElems())
	must(t, e.stream.CopyDtoH(cuda.AsBytes(out), y))
	must(t, e.stream.Synchronize())
	return decode(s.DType, out)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func candidates(cv *Conv) string {
	var parts []string
	for _, p := range cv.Candidates() {
		if p.Status == StatusSuccess {
			parts = append(parts, p.String())
		}
	}
	return strings.Join(parts, "; ")
}

func TestGPUConv(t *testing.T) {
	e := gpu(t)
	base := Shape{N: 2, H: 37, W: 37, C: 64, K: 64, KH: 3, KW: 3, PadH: 1, PadW: 1}
	for _, dt := range []DataType{DataHalf, DataBFloat16} {
		tol := 3e-3
		if dt == DataBFloat16 {
			tol = 2e-2
		}
		for i, mod := range []func(Shape) Shape{
			func(s Shape) Shape { return s },
			func(s Shape) Shape { s.C = 3; return s },
			func(s Shape) Shape { s.K = 48; return s },
			func(s Shape) Shape { s.StrideH, s.StrideW = 2, 2; s.K = 32; return s },
		} {
			s := mod(base)
			s.DType = dt
			t.Run(s.String(), func(t *testing.T) {
				h0, m0 := e.cache.Stats()
				cv, err := e.cache.Get(s)
				if err != nil {
					t.Fatal(err)
				}
				if h1, m1 := e.cache.Stats(); h1 != h0 || m1 != m0+1 {
					t.Errorf("first Get: hits %d->%d misses %d->%d, want a miss", h0, h1, m0, m1)
				}
				t.Logf("plan %v", cv)
				t.Logf("found: %s", candidates(cv))
				d := makeData(s, uint64(10*int(dt)+i))
				got := runConv(t, e, cv, d)
				want := convRef(s, d.x, d.w, nil)
				rel := relErr(got, want)
				t.Logf("rel err %.3g (tol %g)", rel, tol)
				if !(rel < tol) {
					t.Errorf("%v: relative error %g >= %g", s, rel, tol)
				}
				cv2, err := e.cache.Get(s)
				if err != nil || cv2 != cv {
					t.Errorf("second Get returned %p, %v; want the cached %p", cv2, err, cv)
				}
				if h2, m2 := e.cache.Stats(); h2 != h0+1 || m2 != m0+1 {
					t.Errorf("second Get is not a cache hit: hits %d misses %d", h2, m2)
				}
			})
		}
	}
	t.Logf("cache: %d shapes, max workspace %d bytes", e.cache.Len(), e.cache.MaxWorkspace())
}

func TestGPUHeuristic(t *testing.T) {
	e := gpu(t)
	s := Shape{DType: DataHalf, N: 2, H: 37, W: 37, C: 64, K: 64, KH: 3, KW: 3, PadH: 1, PadW: 1}
	cv, err := NewConv(e.h, s, Options{Heuristic: true, WorkspaceLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cv.Close()
	if !cv.Heuristic() {
		t.Error("Heuristic() = false")
	}
	t.Logf("heuristic plan %v", cv)
	d := makeData(s, 99)
	rel := relErr(runConv(t, e, cv, d), convRef(s, d.x, d.w, nil))
	t.Logf("rel err %.3g", rel)
	if !(rel < 3e-3) {
		t.Errorf("relative error %g", rel)
	}
	// A too-small workspace is refused before calling cuDNN.
	if cv.WorkspaceSize() > 0 {
		if err := cv.Forward(e.h, 1, 1, 1, 0, 0); err == nil || !strings.Contains(err.Error(), "workspace") {
			t.Errorf("Forward with no workspace: %v", err)
		}
	}
}

// TestGPUBiasAct checks ForwardBiasAct: bias with the identity, bias and
// ReLU, and bias, a residual z and ReLU, against the float64 reference.
func TestGPUBiasAct(t *testing.T) {
	e := gpu(t)
	if !HasBiasActivation() {
		t.Skip("no cudnnConvolutionBiasActivationForward")
	}
	for _, dt := range []DataType{DataHalf, DataBFloat16} {
		s := Shape{DType: dt, N: 2, H: 37, W: 37, C: 64, K: 64, KH: 3, KW: 3, PadH: 1, PadW: 1}
		cv, err := NewConv(e.h, s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer cv.Close()
		d := makeData(s, 5)
		zv := makeData(s, 6).x[:s.YElems()] // a residual of y's shape (C == K)
		x, w, y := devBuf(t, e, s.XBytes()), devBuf(t, e, s.WBytes()), devBuf(t, e, s.YBytes())
		b, z := devBuf(t, e, 2*s.K), devBuf(t, e, s.YBytes())
		must(t, e.stream.CopyHtoD(b, cuda.AsBytes(d.br)))
		must(t, e.stream.CopyHtoD(x, cuda.AsBytes(d.xr)))
		must(t, e.stream.CopyHtoD(w, cuda.AsBytes(d.wr)))
		zr := encode(dt, zv)
		must(t, e.stream.CopyHtoD(z, cuda.AsBytes(zr)))
		for _, c := range []struct {
			name     string
			relu     bool
			residual bool
		}{{"bias", false, false}, {"bias+relu", true, false}, {"bias+residual+relu", true, true}} {
			wsSize, err := cv.BiasActWorkspaceSize()
			if err != nil {
				t.Fatalf("%v: %v", s, err)
			}
			ws := devBuf(t, e, wsSize)
			must(t, e.stream.Memset8(y, 0xff, s.YBytes()))
			zp, alpha2 := y, float32(0)
			if c.residual {
				zp, alpha2 = z, 1
			}
			if err := cv.ForwardBiasAct(e.h, x, w, zp, b, y, ws, wsSize, alpha2, c.relu); err != nil {
				t.Fatalf("%v %s: %v", s, c.name, err)
			}
			out := make([]uint16, s.YElems())
			must(t, e.stream.CopyDtoH(cuda.AsBytes(out), y))
			must(t, e.stream.Synchronize())
			want := convRef(s, d.x, d.w, d.bias)
			zq := decode(dt, zr)
			for i := range want {
				if c.residual {
					want[i] += zq[i]
				}
				if c.relu {
					want[i] = max(want[i], 0)
				}
			}
			rel := relErr(decode(dt, out), want)
			tol := 3e-3
			if dt == DataBFloat16 {
				tol = 2e-2
			}
			t.Logf("ForwardBiasAct %v %s (ws %d): rel err %.3g", s, c.name, wsSize, rel)
			if !(rel < tol) {
				t.Errorf("ForwardBiasAct %v %s: relative error %g", s, c.name, rel)
			}
		}
	}
}

// A cuDNN error carries the status code, its name and cuDNN's own message.
func TestGPUErrorText(t *testing.T) {
	e := gpu(t)
	var d uintptr
	err := e.h.do(func() error {
		if err := check("cudnnCreateTensorDescriptor", lib.cudnnCreateTensorDesc(&d)); err != nil {
			return err
		}
		return check("cudnnSetTensor4dDescriptor", lib.cudnnSetTensor4dDesc(d, int32(TensorNHWC), int32(DataHalf), -1, 3, 4, 4))
	})
	if d != 0 {
		lib.cudnnDestroyTensorDesc(d)
	}
	t.Logf("error text: %v", err)
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "CUDNN_STATUS_BAD_PARAM") {
		t.Errorf("negative dim: %v, want a CUDNN_STATUS_BAD_PARAM *Error", err)
	}
}

// timeForward returns the median of 20 timed Forward calls (after 5
// warm-up ones), measured with events on e's stream.
func timeForward(t *testing.T, e *gpuEnv, cv *Conv, x, w, y, ws cuda.DevicePtr) time.Duration {
	t.Helper()
	start, err := e.ctx.NewEvent(cuda.EventDefault)
	must(t, err)
	defer start.Close()
	end, err := e.ctx.NewEvent(cuda.EventDefault)
	must(t, err)
	defer end.Close()
	var times []time.Duration
	for i := 0; i < 25; i++ {
		must(t, start.Record(e.stream))
		must(t, cv.Forward(e.h, x, w, y, ws, cv.WorkspaceSize()))
		must(t, end.Record(e.stream))
		must(t, end.Synchronize())
		d, err := cuda.ElapsedTime(start, end)
		must(t, err)
		if i >= 5 {
			times = append(times, d)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	return times[len(times)/2]
}

// TestGPUTiming times Forward with the Find plan and with the heuristic
// plan, on the 37x37 test shape and on a realesr-animevideov3-sized layer
// (batch 8, 360x640, 64->64, 3x3), in f16 and bf16.
func TestGPUTiming(t *testing.T) {
	e := gpu(t)
	if testing.Short() {
		t.Skip("short")
	}
	for _, dt := range []DataType{DataHalf, DataBFloat16} {
		for _, s := range []Shape{
			{DType: dt, N: 2, H: 37, W: 37, C: 64, K: 64, KH: 3, KW: 3, PadH: 1, PadW: 1},
			{DType: dt, N: 8, H: 360, W: 640, C: 64, K: 64, KH: 3, KW: 3, PadH: 1, PadW: 1},
		} {
			found, err := e.cache.Get(s)
			if err != nil {
				t.Fatal(err)
			}
			heur, err := NewConv(e.h, s, Options{Heuristic: true})
			if err != nil {
				t.Fatal(err)
			}
			x, w, y := devBuf(t, e, s.XBytes()), devBuf(t, e, s.WBytes()), devBuf(t, e, s.YBytes())
			ws := devBuf(t, e, max(found.WorkspaceSize(), heur.WorkspaceSize()))
			must(t, e.stream.Memset8(x, 0x3c, s.XBytes())) // f16 1.05, bf16 0.0115
			must(t, e.stream.Memset8(w, 0x1c, s.WBytes()))
			ho, wo := found.OutHW()
			flops := 2.0 * float64(s.N*ho*wo*s.K*s.KH*s.KW*s.C)
			for _, cv := range []*Conv{found, heur} {
				med := timeForward(t, e, cv, x, w, y, ws)
				t.Logf("%v: median %v = %.1f TFLOP/s", cv, med, flops/med.Seconds()/1e12)
			}
			heur.Close()
		}
	}
}

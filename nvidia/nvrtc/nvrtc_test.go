package nvrtc

import (
	"errors"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

func needNVRTC(t *testing.T) {
	t.Helper()
	if err := Load(); err != nil {
		t.Skip("no NVRTC: " + err.Error())
	}
}

const saxpySrc = `
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
`

func TestCompileErrorLog(t *testing.T) {
	needNVRTC(t)
	c := &Compiler{Major: 9, Minor: 0}
	_, err := c.Compile(Program{Name: "bad.cu", Source: "extern \"C\" __global__ void k(float* p) { p[0] = undefined_name; }"})
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("want a CompileError, got %v", err)
	}
	t.Logf("compile error:\n%v", err)
	first, _, _ := strings.Cut(err.Error(), "\n")
	if !strings.Contains(first, "NVRTC_ERROR_COMPILATION (6)") || !strings.Contains(first, "undefined_name") {
		t.Errorf("summary line: %s", first)
	}
}

func TestCompileSaxpyAndLaunch(t *testing.T) {
	needNVRTC(t)
	major, minor, _ := Version()
	t.Logf("NVRTC %d.%d at %s; supported archs %v", major, minor, LibraryPath(), SupportedArchs())
	if err := cuda.Init(); err != nil {
		t.Skip("no CUDA driver: " + err.Error())
	}
	dev, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	unlock, err := ctx.LockThread()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cmaj, cmin, _ := dev.ComputeCapability()

	comp := &Compiler{Major: cmaj, Minor: cmin, Cache: &Cache{Dir: t.TempDir()}}
	p := Program{Name: "saxpy.cu", Source: saxpySrc, Options: []string{"--use_fast_math"}}
	first, err := comp.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	second, err := comp.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compiled saxpy.cu: %s for %s, %d bytes, cached=%v; second compile cached=%v", first.Kind, first.Arch, len(first.Image), first.Cached, second.Cached)
	if first.Cached || !second.Cached || string(first.Image) != string(second.Image) {
		t.Fatalf("cache: first cached=%v, second cached=%v, same image=%v", first.Cached, second.Cached, string(first.Image) == string(second.Image))
	}
	if first.Kind != CUBIN {
		t.Errorf("got %s, want a CUBIN from NVRTC %d.%d", first.Kind, major, minor)
	}
	runSaxpy(t, ctx, second)

	// The PTX path (used when NVRTC lacks nvrtcGetCUBIN or the GPU is newer
	// than NVRTC): the driver compiles the PTX when loading it.
	p.Arch = "compute_" + itoa(cmaj*10+cmin)
	ptx, err := comp.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if ptx.Kind != PTX || !strings.Contains(string(ptx.Image), ".entry saxpy") {
		t.Fatalf("PTX output: kind %s", ptx.Kind)
	}
	t.Logf("compiled saxpy.cu to PTX for %s, %d bytes", ptx.Arch, len(ptx.Image))
	runSaxpy(t, ctx, ptx)
}

func runSaxpy(t *testing.T, ctx *cuda.Context, out *Output) {
	t.Helper()
	mod, err := ctx.LoadModule(out.Image)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	fn, err := mod.Function("saxpy")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_000
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), float32(2*i)
	}
	dx, err := ctx.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer dx.Free()
	dy, err := ctx.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer dy.Free()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CopyHtoD(dx.Ptr(), cuda.AsBytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyHtoD(dy.Ptr(), cuda.AsBytes(y)); err != nil {
		t.Fatal(err)
	}
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: (n + 255) / 256}, Block: cuda.Dim3{X: 256}, Stream: s}
	if err := fn.Launch(cfg, float32(3), dx, dy, uint32(n)); err != nil {
		t.Fatal(err)
	}
	res := make([]float32, n)
	if err := s.CopyDtoH(cuda.AsBytes(res), dy.Ptr()); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range res {
		if want := 3*float32(i) + float32(2*i); res[i] != want {
			t.Fatalf("%s saxpy: y[%d] = %v, want %v", out.Kind, i, res[i], want)
		}
	}
	t.Logf("%s saxpy launched: %d results correct", out.Kind, n)
}

func itoa(v int) string {
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}

func TestIncludeDirs(t *testing.T) {
	t.Logf("include dirs with cuda_fp16.h: %v", IncludeDirs())
}

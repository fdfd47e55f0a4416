package cuda

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	gpuOnce sync.Once
	gpuCtx  *Context
	gpuErr  error
)

// gpu returns a context on device 0 shared by the tests, or skips.
func gpu(t *testing.T) *Context {
	t.Helper()
	gpuOnce.Do(func() {
		if gpuErr = Init(); gpuErr != nil {
			return
		}
		n, err := DeviceCount()
		if err != nil {
			gpuErr = err
			return
		}
		if n == 0 {
			gpuErr = errors.New("no CUDA device")
			return
		}
		d, err := GetDevice(0)
		if err != nil {
			gpuErr = err
			return
		}
		gpuCtx, gpuErr = d.PrimaryContext()
	})
	if gpuErr != nil {
		t.Skip("no CUDA driver: " + gpuErr.Error())
	}
	return gpuCtx
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Op: "cuMemAlloc_v2", Code: ErrorOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Msg: "out of memory"}
	if got := e.Error(); got != "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(e, ErrOutOfMemory) || errors.Is(e, ErrNotReady) {
		t.Error("errors.Is by code is wrong")
	}
	e2 := newError("cuX", 719)
	if !strings.Contains(e2.Error(), "CUDA_ERROR_LAUNCH_FAILED (719)") {
		t.Errorf("newError = %q", e2)
	}
	if check("cuX", 0) != nil {
		t.Error("check(0) != nil")
	}
	if n := Result(12345).Name(); n != "CUDA_ERROR_UNRECOGNIZED" {
		t.Errorf("unknown code name = %q", n)
	}
	if VersionString(13000) != "13.0" || VersionString(12080) != "12.8" {
		t.Error("VersionString")
	}
}

func TestArgValue(t *testing.T) {
	cases := []struct {
		in   any
		want uint64
	}{
		{DevicePtr(0x7f0012345600), 0x7f0012345600},
		{int32(-1), 0xffffffff},
		{uint32(7), 7},
		{float32(1.5), uint64(math.Float32bits(1.5))},
		{int64(-2), 0xfffffffffffffffe},
		{float64(2.25), math.Float64bits(2.25)},
		{int16(-1), 0xffff},
		{uint8(200), 200},
		{true, 1},
	}
	for _, c := range cases {
		v, raw, err := argValue(c.in)
		if err != nil || raw != nil || v != c.want {
			t.Errorf("argValue(%T %v) = %#x, %v, %v; want %#x", c.in, c.in, v, raw, err, c.want)
		}
	}
	if _, _, err := argValue("string"); err == nil {
		t.Error("string accepted as a kernel argument")
	}
	if _, _, err := argValue((*Buffer)(nil)); err == nil {
		t.Error("nil *Buffer accepted")
	}
	if _, raw, _ := argValue(Raw{1, 2, 3}); len(raw) != 3 {
		t.Error("Raw not passed through")
	}
}

func TestDevice(t *testing.T) {
	ctx := gpu(t)
	v, err := DriverVersion()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := DeviceCount()
	d := ctx.Device()
	name, err := d.Name()
	if err != nil {
		t.Fatal(err)
	}
	major, minor, err := d.ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	sms, _ := d.SMCount()
	total, _ := d.TotalMem()
	uuid, _ := d.UUID()
	bus, _ := d.PCIBusID()
	free, ctotal, err := ctx.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("libcuda %s, driver API %s, %d device(s); device 0: %s, sm_%d%d, %d SMs, %.1f GiB total (%.1f GiB free per cuMemGetInfo), %s, %s",
		LibraryPath(), VersionString(v), n, name, major, minor, sms, float64(total)/(1<<30), float64(free)/(1<<30), uuid, bus)
	if ctotal != total {
		t.Logf("cuMemGetInfo total %d != cuDeviceTotalMem %d", ctotal, total)
	}
	if name == "" || major < 3 || sms <= 0 || total == 0 || free > ctotal {
		t.Errorf("implausible device properties")
	}
}

func TestOutOfMemoryError(t *testing.T) {
	ctx := gpu(t)
	_, err := ctx.Alloc(1 << 50)
	t.Logf("Alloc(1 PiB): %v", err)
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("want CUDA_ERROR_OUT_OF_MEMORY, got %v", err)
	}
	if !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY (2)") {
		t.Errorf("error lacks the name and code: %v", err)
	}
}

func TestRoundTripPinned(t *testing.T) {
	ctx := gpu(t)
	unlock, err := ctx.LockThread()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	const n = 64 << 20
	src, err := ctx.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := ctx.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	a, err := ctx.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	b, err := ctx.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := make([]*Event, 4)
	for i := range ev {
		if ev[i], err = ctx.NewEvent(EventDefault); err != nil {
			t.Fatal(err)
		}
		defer ev[i].Close()
	}
	sb := src.Bytes()
	for i := range sb {
		sb[i] = byte(i*7 + i>>11)
	}
	clear(dst.Bytes())

	for rep := 0; rep < 2; rep++ { // the first round warms up
		must(t, ev[0].Record(s))
		must(t, s.CopyHtoD(a.Ptr(), sb))
		must(t, ev[1].Record(s))
		must(t, s.CopyDtoD(b.Ptr(), a.Ptr(), n))
		must(t, ev[2].Record(s))
		must(t, s.CopyDtoH(dst.Bytes(), b.Ptr()))
		must(t, ev[3].Record(s))
	}
	done, err := ev[3].Query()
	if err != nil {
		t.Fatal(err)
	}
	must(t, ev[3].Synchronize())
	done2, err := ev[3].Query()
	if err != nil || !done2 {
		t.Fatalf("event not done after Synchronize: %v %v", done2, err)
	}
	if !bytes.Equal(sb, dst.Bytes()) {
		t.Fatal("H->D->D->H round trip through pinned memory changed the data")
	}
	h2d, _ := ElapsedTime(ev[0], ev[1])
	d2d, _ := ElapsedTime(ev[1], ev[2])
	d2h, err := ElapsedTime(ev[2], ev[3])
	if err != nil {
		t.Fatal(err)
	}
	gbps := func(bytes int, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e9 }
	t.Logf("64 MiB: H2D %v (%.1f GB/s), D2D %v (%.0f GB/s read+write %.0f), D2H %v (%.1f GB/s); query before sync: done=%v",
		h2d, gbps(n, h2d), d2d, gbps(n, d2d), gbps(2*n, d2d), d2h, gbps(n, d2h), done)
	if h2d <= 0 || d2d <= 0 || d2h <= 0 {
		t.Error("non-positive event times")
	}

	// Memset, then a copy into Go memory (pageable, synchronous).
	must(t, s.Memset8(a.Ptr().Add(16), 0xAB, 100))
	out := make([]byte, 128)
	must(t, s.CopyDtoH(out, a.Ptr()))
	must(t, s.Synchronize())
	for i, c := range out {
		want := sb[i]
		if i >= 16 && i < 116 {
			want = 0xAB
		}
		if c != want {
			t.Fatalf("after Memset8, byte %d = %#x, want %#x", i, c, want)
		}
	}
	must(t, s.Memset32(a.Ptr().Add(8), 0x01020304, 3))
	must(t, s.CopyDtoH(out, a.Ptr()))
	must(t, s.Synchronize())
	for i := 8; i < 20; i++ {
		if want := byte(4 - (i-8)%4); out[i] != want {
			t.Fatalf("after Memset32, byte %d = %#x, want %#x", i, out[i], want)
		}
	}
	if out[20] != 0xAB || out[7] != sb[7] {
		t.Fatalf("Memset32 wrote outside its 3 words")
	}
	if s.Memset32(a.Ptr().Add(2), 0, 1) == nil {
		t.Error("Memset32 accepted an unaligned address")
	}

	// Idempotent frees and closes.
	must(t, a.Free())
	must(t, a.Free())
	must(t, src.Free())
	must(t, src.Free())
	if src.Bytes() != nil {
		t.Error("freed HostBuffer still has bytes")
	}
	must(t, s.Close())
	must(t, s.Close())
	must(t, ev[0].Close())
	must(t, ev[0].Close())
}

// TestOtherGoroutine uses the context from goroutines that never made it
// current: every call must push and pop it.
func TestOtherGoroutine(t *testing.T) {
	ctx := gpu(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			b, err := ctx.Alloc(1 << 20)
			if err != nil {
				errs <- err
				return
			}
			defer b.Free()
			s, err := ctx.NewStream()
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			in := bytes.Repeat([]byte{byte(i)}, 4096)
			out := make([]byte, 4096)
			if err := s.CopyHtoD(b.Ptr(), in); err != nil {
				errs <- err
				return
			}
			if err := s.CopyDtoH(out, b.Ptr()); err != nil {
				errs <- err
				return
			}
			if err := s.Synchronize(); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(in, out) {
				errs <- errors.New("round trip from a goroutine changed the data")
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// scaleAddPTX is x[i] = x[i]*a + b for i < n, hand-written PTX that the
// driver compiles for whatever GPU runs it.
const scaleAddPTX = `
.version 7.0
.target sm_75
.address_size 64

.visible .entry scale_add(
	.param .u64 p_x,
	.param .f32 p_a,
	.param .f32 p_b,
	.param .u32 p_n
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [p_x];
	ld.param.f32 %f1, [p_a];
	ld.param.f32 %f2, [p_b];
	ld.param.u32 %r1, [p_n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r5, 4;
	add.s64 %rd4, %rd2, %rd3;
	ld.global.f32 %f3, [%rd4];
	fma.rn.f32 %f3, %f3, %f1, %f2;
	st.global.f32 [%rd4], %f3;
DONE:
	ret;
}
`

func loadScaleAdd(t *testing.T, ctx *Context) (*Module, *Function) {
	t.Helper()
	m, err := ctx.LoadModule([]byte(scaleAddPTX))
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function("scale_add")
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	return m, f
}

func TestLaunchPTX(t *testing.T) {
	ctx := gpu(t)
	unlock, err := ctx.LockThread()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	m, f := loadScaleAdd(t, ctx)
	defer m.Close()
	if _, err := m.Function("no_such_kernel"); !errors.Is(err, &Error{Code: ErrorNotFound}) {
		t.Errorf("missing kernel: %v", err)
	} else {
		t.Logf("missing kernel: %v", err)
	}
	regs, _ := f.Attribute(FuncNumRegs)

	const n = 1000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	buf, err := ctx.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	must(t, s.CopyHtoD(buf.Ptr(), AsBytes(x)))
	cfg := LaunchConfig{Grid: Dim3{X: (n + 255) / 256}, Block: Dim3{X: 256}, Stream: s}
	must(t, f.Launch(cfg, buf, float32(2), float32(0.5), uint32(n)))
	out := make([]float32, n)
	must(t, s.CopyDtoH(AsBytes(out), buf.Ptr()))
	must(t, s.Synchronize())
	for i := range out {
		if want := float32(i)*2 + 0.5; out[i] != want {
			t.Fatalf("x[%d] = %v, want %v", i, out[i], want)
		}
	}
	t.Logf("PTX kernel scale_add (%d registers) ran correctly on %d elements", regs, n)
	if err := f.Launch(cfg, buf, "bad"); err == nil {
		t.Error("Launch accepted a string argument")
	}
}

func TestGraphCapture(t *testing.T) {
	ctx := gpu(t)
	unlock, err := ctx.LockThread()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	m, f := loadScaleAdd(t, ctx)
	defer m.Close()
	const n = 4096
	buf, err := ctx.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i % 10)
	}
	must(t, s.CopyHtoD(buf.Ptr(), AsBytes(x)))
	must(t, s.Synchronize())

	cfg := LaunchConfig{Grid: Dim3{X: n / 256}, Block: Dim3{X: 256}, Stream: s}
	must(t, s.BeginCapture(CaptureThreadLocal))
	capturing, _ := s.Capturing()
	// Two launches: x = 2x + 1, then x = x - 1  (together: x = 2x).
	must(t, f.Launch(cfg, buf.Ptr(), float32(2), float32(1), uint32(n)))
	must(t, f.Launch(cfg, buf.Ptr(), float32(1), float32(-1), uint32(n)))
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	nodes, err := g.NumNodes()
	if err != nil && !errors.Is(err, ErrNotSupported) {
		t.Fatal(err)
	}
	if err == nil && nodes != 2 {
		t.Errorf("graph has %d nodes, want 2", nodes)
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	// Capture must not have run the kernels.
	out := make([]float32, n)
	must(t, s.CopyDtoH(AsBytes(out), buf.Ptr()))
	if out[3] != 3 {
		t.Fatalf("capture ran the work: x[3] = %v", out[3])
	}
	const replays = 3
	for i := 0; i < replays; i++ {
		must(t, exec.Launch(s))
	}
	must(t, s.CopyDtoH(AsBytes(out), buf.Ptr()))
	must(t, s.Synchronize())
	for i := range out {
		if want := float32(i%10) * 8; out[i] != want {
			t.Fatalf("after %d replays x[%d] = %v, want %v", replays, i, out[i], want)
		}
	}
	t.Logf("graph capture: capturing=%v, %d nodes, %d replays give x*8 as expected", capturing, nodes, replays)
	must(t, exec.Close())
	must(t, exec.Close())
	must(t, g.Close())
	must(t, g.Close())
}

func TestPeerAccess(t *testing.T) {
	ctx := gpu(t)
	d := ctx.Device()
	can, err := d.CanAccessPeer(d)
	if err != nil || can {
		t.Errorf("CanAccessPeer(self) = %v, %v; want false, nil", can, err)
	}
	n, _ := DeviceCount()
	if n == 1 {
		t.Logf("one GPU: CanAccessPeer(self) = %v, %v", can, err)
		return
	}
	for i := 1; i < n; i++ {
		p, err := GetDevice(i)
		if err != nil {
			t.Fatal(err)
		}
		can, err := d.CanAccessPeer(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("device 0 -> %d peer access: %v", i, can)
		if can {
			pc, err := p.PrimaryContext()
			if err != nil {
				t.Fatal(err)
			}
			must(t, ctx.EnablePeerAccess(pc))
			must(t, ctx.EnablePeerAccess(pc)) // twice is fine
			pc.Close()
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMemPool allocates from a pool in a stream's order, frees, reuses the
// memory for another size without reserving more, and trims.
func TestMemPool(t *testing.T) {
	ctx := gpu(t)
	unlock, err := ctx.LockThread()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	dev, err := GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	mp, err := NewMemPool(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	must(t, mp.SetReleaseThreshold(math.MaxUint64))
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 64 << 20
	p, err := s.AllocAsync(mp, n)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Memset8(p, 7, n))
	out := make([]byte, 4096)
	must(t, s.CopyDtoH(out, p.Add(n-4096)))
	must(t, s.FreeAsync(p))
	must(t, s.Synchronize())
	for i, v := range out {
		if v != 7 {
			t.Fatalf("byte %d = %d after the memset", i, v)
		}
	}
	now, high, err := mp.Reserved()
	if err != nil || now < n || high < n {
		t.Fatalf("reserved %d, high %d (%v) after a %d-byte allocation", now, high, err, n)
	}
	// Two half-size blocks fit in what the first one freed.
	q1, err1 := s.AllocAsync(mp, n/2)
	q2, err2 := s.AllocAsync(mp, n/2)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if now2, _, _ := mp.Reserved(); now2 != now {
		t.Errorf("reserved %d after reusing freed memory, was %d", now2, now)
	}
	must(t, s.FreeAsync(q1))
	must(t, s.FreeAsync(q2))
	must(t, s.Synchronize())
	must(t, mp.TrimTo(0))
	if now3, _, _ := mp.Reserved(); now3 != 0 {
		t.Errorf("reserved %d after trimming", now3)
	}
	if _, err := s.AllocAsync(mp, 1<<50); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("1 PiB from the pool: want CUDA_ERROR_OUT_OF_MEMORY, got %v", err)
	}
}

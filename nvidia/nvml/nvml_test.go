package nvml

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

func TestErrorFormat(t *testing.T) {
	e := &Error{Op: "nvmlDeviceGetMemoryInfo", Code: NotSupported, Name: NotSupported.Name(), Msg: "Not Supported"}
	if got := e.Error(); got != "nvmlDeviceGetMemoryInfo: NVML_ERROR_NOT_SUPPORTED (3): Not Supported" {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(e, &Error{Code: NotSupported}) {
		t.Error("errors.Is by code")
	}
}

// TestSamplerFake runs the sampler over a fake device: a memory ramp and
// a utilization pattern with known statistics.
func TestSamplerFake(t *testing.T) {
	before := runtime.NumGoroutine()
	var n atomic.Int64
	s := NewSampler(context.Background(), 10*time.Millisecond, func() (Sample, error) {
		i := n.Add(1)
		if i == 3 {
			return Sample{}, errors.New("transient")
		}
		mem := uint64(1000 + 10*min(i, 5)) // rises to 1050, then flat
		util := uint32(0)
		if i%2 == 0 {
			util = 100
		}
		return Sample{MemUsed: mem, GPUUtil: util}, nil
	})
	time.Sleep(150 * time.Millisecond)
	mid := s.Stats()
	st := s.Stop()
	st2 := s.Stop() // idempotent
	t.Logf("after ~150 ms at 10 ms: %+v", st)
	if st.Samples < 5 || st.Samples > 30 {
		t.Errorf("%d samples in 150 ms at 10 ms", st.Samples)
	}
	if st.Samples < mid.Samples || st2.Samples != st.Samples {
		t.Error("Stop after Stop changed the stats")
	}
	if st.StartMemUsed != 1010 || st.PeakMemUsed != 1050 {
		t.Errorf("start/peak memory = %d/%d, want 1010/1050", st.StartMemUsed, st.PeakMemUsed)
	}
	if st.Errors != 1 || st.Err == nil {
		t.Errorf("errors = %d (%v)", st.Errors, st.Err)
	}
	if st.MaxGPUUtil != 100 || st.MeanGPUUtil < 30 || st.MeanGPUUtil > 70 {
		t.Errorf("util mean %.1f max %d", st.MeanGPUUtil, st.MaxGPUUtil)
	}
	select {
	case <-s.Done():
	default:
		t.Error("goroutine still running after Stop")
	}
	calls := n.Load()
	time.Sleep(30 * time.Millisecond)
	if n.Load() != calls {
		t.Error("sampling continued after Stop")
	}
	waitGoroutines(t, before)
}

func TestSamplerContextCancel(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	s := NewSampler(ctx, time.Millisecond, func() (Sample, error) { return Sample{MemUsed: 1}, nil })
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case <-s.Done():
	case <-time.After(time.Second):
		t.Fatal("sampler did not stop when its context ended")
	}
	if st := s.Stop(); st.Samples == 0 {
		t.Error("no samples")
	}
	waitGoroutines(t, before)
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if runtime.NumGoroutine() <= want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("goroutine leak: %d running, %d before", runtime.NumGoroutine(), want)
}

func needNVML(t *testing.T) {
	t.Helper()
	if err := Init(); err != nil {
		t.Skip("no NVML (no NVIDIA driver): " + err.Error())
	}
}

func TestDevices(t *testing.T) {
	needNVML(t)
	v, err := DriverVersion()
	if err != nil {
		t.Fatal(err)
	}
	cv, _ := CUDADriverVersion()
	n, err := DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("libnvidia-ml at %s: driver %s, CUDA %d, %d device(s)", LibraryPath(), v, cv, n)
	for i := 0; i < n; i++ {
		d, err := DeviceByIndex(i)
		if err != nil {
			t.Fatal(err)
		}
		name, err := d.Name()
		if err != nil {
			t.Fatal(err)
		}
		uuid, _ := d.UUID()
		m, err := d.Memory()
		if err != nil {
			t.Fatal(err)
		}
		u, err := d.Utilization()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("device %d: %s %s, memory used %.2f GiB / total %.1f GiB (free %.1f, reserved %.2f), utilization gpu %d%% mem %d%%",
			i, name, uuid, gib(m.Used), gib(m.Total), gib(m.Free), gib(m.Reserved), u.GPU, u.Memory)
		if m.Total == 0 || m.Used > m.Total || u.GPU > 100 {
			t.Error("implausible memory or utilization")
		}
	}
	if _, err := DeviceByIndex(n + 5); err == nil {
		t.Error("DeviceByIndex out of range gave no error")
	} else {
		t.Logf("out of range: %v", err)
	}
}

// spinPTX busy-waits for the given number of clock cycles.
const spinPTX = `
.version 7.0
.target sm_75
.address_size 64

.visible .entry spin(.param .u64 p_cycles)
{
	.reg .pred %p<2>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [p_cycles];
	mov.u64 %rd2, %clock64;
LOOP:
	mov.u64 %rd3, %clock64;
	sub.s64 %rd4, %rd3, %rd2;
	setp.lt.s64 %p1, %rd4, %rd1;
	@%p1 bra LOOP;
	ret;
}
`

// TestSamplerGPU samples device 0 while 2 GiB are allocated and a kernel
// keeps the GPU busy for about 300 ms.
func TestSamplerGPU(t *testing.T) {
	needNVML(t)
	if err := cuda.Init(); err != nil {
		t.Skip("no CUDA driver: " + err.Error())
	}
	cdev, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	uuid, err := cdev.UUID()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := DeviceByUUID(uuid)
	if err != nil {
		t.Fatalf("CUDA device 0 (%s) not found by NVML: %v", uuid, err)
	}
	ctx, err := cdev.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	unlock, err := ctx.LockThread()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	mod, err := ctx.LoadModule([]byte(spinPTX))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	spin, err := mod.Function("spin")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	clockKHz, _ := cdev.Attribute(cuda.AttrClockRate)
	if clockKHz <= 0 {
		clockKHz = 2_000_000
	}
	time.Sleep(200 * time.Millisecond) // let utilization settle

	before := runtime.NumGoroutine()
	s := dev.StartSampler(context.Background(), 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	const big = 2 << 30
	buf, err := ctx.Alloc(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Memset8(buf.Ptr(), 1, big); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cycles := uint64(clockKHz) * 1000 * 3 / 10 // ~300 ms
	if err := spin.Launch(cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}, Stream: stream}, cycles); err != nil {
		t.Fatal(err)
	}
	if err := stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	busy := time.Since(start)
	time.Sleep(50 * time.Millisecond)
	buf.Free()
	st := s.Stop()
	t.Logf("sampler over %v (kernel busy %v): %d samples (%d errors), memory used start %.2f GiB peak %.2f GiB (+%.2f GiB), GPU util mean %.1f%% max %d%%",
		st.Duration.Round(time.Millisecond), busy.Round(time.Millisecond), st.Samples, st.Errors, gib(st.StartMemUsed), gib(st.PeakMemUsed),
		gib(st.PeakMemUsed-st.StartMemUsed), st.MeanGPUUtil, st.MaxGPUUtil)
	if st.Errors > 0 {
		t.Errorf("sampling errors: %v", st.Err)
	}
	if want := int(st.Duration / (20 * time.Millisecond)); st.Samples < want {
		t.Errorf("%d samples over %v: not polling every 10 ms", st.Samples, st.Duration)
	}
	if st.PeakMemUsed-st.StartMemUsed < big*9/10 {
		t.Errorf("peak memory rose by %.2f GiB, want about 2 GiB", gib(st.PeakMemUsed-st.StartMemUsed))
	}
	if st.MaxGPUUtil == 0 {
		t.Errorf("GPU utilization never above 0 while a kernel ran %v", busy)
	}
	waitGoroutines(t, before)
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

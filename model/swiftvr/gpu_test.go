package swiftvr

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/backend/cuda"
	"github.com/vsr-dev/vsr/internal/testutil"
	"github.com/vsr-dev/vsr/parallel"
)

// TestReAEOnGPU runs the same ReAE on the CPU in float32 and on the GPU in
// fp16 and bf16, in two chunks, and compares; it also checks that the
// TemporalGrow order and the frame batch leave the GPU output unchanged
// (bitwise, or else reports the PSNR when cuDNN picks another kernel).
func TestReAEOnGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src := randomReAE(1, 8, []int{16, 8, 8, 8}, 8)
	c := cpu.New(0)
	rc, err := NewReAE(c, src)
	if err != nil {
		t.Fatal(err)
	}
	xc := randVideo(c, 12, 32, 48, 5)
	want, _ := c.Download(roundTrip(t, rc, c, xc, []int{8, 4}))
	xv, _ := c.Download(xc)
	for _, dt := range []cuda.DType{cuda.F16, cuda.BF16} {
		g := gpu(t, dt)
		rg, err := NewReAE(g, src)
		if err != nil {
			t.Fatal(err)
		}
		xg, _ := g.Upload(xc.Shape(), xv)
		run := func(before bool, fb int) []float32 {
			rg.TGrowBefore, rg.FrameBatch = before, fb
			v, err := g.Download(roundTrip(t, rg, g, xg, []int{8, 4}))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		got := run(false, 0)
		e := rel(got, want)
		bound := map[cuda.DType]float64{cuda.F16: 1e-2, cuda.BF16: 5e-2}[dt]
		if e > bound || math.IsNaN(e) {
			t.Errorf("%v: relative error %.3g against the CPU, bound %.3g", dt, e, bound)
		} else {
			t.Logf("%v: relative error %.3g against the CPU float32 ReAE", dt, e)
		}
		for _, v := range []struct {
			before bool
			fb     int
		}{{true, 0}, {false, 1}, {true, 1}, {true, 2}} {
			o := run(v.before, v.fb)
			if !bytes.Equal(f32bytes(o), f32bytes(got)) {
				t.Logf("%v tgrow before=%v frame batch %d: not bitwise equal to the official order; PSNR %.1f dB", dt, v.before, v.fb, psnr(o, got))
				if psnr(o, got) < 40 {
					t.Errorf("%v tgrow before=%v frame batch %d: PSNR %.1f dB is below bf16 rounding", dt, v.before, v.fb, psnr(o, got))
				}
			}
		}
		rg.Close()
		g.Close()
	}
}

// TestReAEGoldenGPU checks the GPU ReAE of the tiny synthetic checkpoint
// against the independent PyTorch implementation, in fp16 and bf16.
func TestReAEGoldenGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, dt := range []cuda.DType{cuda.F16, cuda.BF16} {
		g := gpu(t, dt)
		z, y, wz, wy := goldenCase(t, g, "synth_tiny_reae.safetensors", "reae_synth")
		ez, ey := rel(z, wz), rel(y, wy)
		bound := map[cuda.DType]float64{cuda.F16: 1e-2, cuda.BF16: 5e-2}[dt]
		if ez > bound || ey > bound || math.IsNaN(ez+ey) {
			t.Errorf("%v: relative error latent %.3g, output %.3g; bound %.3g", dt, ez, ey, bound)
		}
		t.Logf("%v: relative error against PyTorch float32: latent %.3g, output %.3g", dt, ez, ey)
		g.Close()
	}
}

var rel = testutil.RelErr[float32]

// psnr compares two images in [0,1] after clamping, as frames would be.
func psnr(a, b []float32) float64 {
	var mse float64
	for i := range a {
		x := math.Min(math.Max(float64(a[i]), 0), 1) - math.Min(math.Max(float64(b[i]), 0), 1)
		mse += x * x
	}
	mse /= float64(len(a))
	if mse == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(1/mse)
}

var _ backend.Backend = (*cuda.Backend)(nil)

// TestDiTOnGPU runs the tiny checkpoint's DiT and one full-width block in
// bf16 on the GPU against the independent PyTorch float32 predictions
// (testdata/dit), with the prompt merged and not.
func TestDiTOnGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := gpu(t, cuda.BF16)
	for _, c := range ditGolden {
		for _, merge := range []bool{true, false} {
			withMerge(t, merge)
			d, x, got, want := c.run(t, g)
			if e := rel(got, want); e > 3e-2 || math.IsNaN(e) {
				t.Errorf("%s bf16, merged prompt %v: relative error %.3g against PyTorch float32, bound 3e-2", c.preset, merge, e)
			} else {
				t.Logf("%s bf16, merged prompt %v: relative error %.3g against PyTorch float32", c.preset, merge, e)
			}
			d.FFNRows = 200 // pieces of 192 rows and a shorter last one
			if e := rel(forward(t, g, d, x, c.f, c.h, c.w, c.off), got); e > 1e-2 {
				t.Errorf("%s bf16: FFN in pieces differs from one pass by %.3g", c.preset, e)
			} else {
				t.Logf("%s bf16: FFN in pieces against one pass: %.3g", c.preset, e)
			}
			d.Close()
		}
	}
}

// TestDiTGraphsGPU runs the tiny DiT in bf16 on the GPU op by op and with
// recorded CUDA graphs over two latent shapes taken in turn (as a
// service's requests of two sizes would) and several RoPE offsets: every
// output is bitwise the same, and every pass after a shape's first is a
// replay. Turning Graphs off again runs op by op.
func TestDiTGraphsGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := gpu(t, cuda.BF16)
	d, dims := synthDiT(t, g, "tiny")
	runs := []struct{ f, h, w, off int }{{3, 8, 36, 0}, {3, 8, 36, 4}, {2, 40, 12, 1}, {3, 8, 36, 9}, {2, 40, 12, 6}, {2, 40, 12, 6}}
	xs := make([][]float32, len(runs))
	want := make([][]byte, len(runs))
	d.Graphs = false
	for i, r := range runs {
		xs[i] = randLatents(r.f*r.h*r.w*dims.InChannels, uint64(i))
		want[i] = f32bytes(forward(t, g, d, xs[i], r.f, r.h, r.w, r.off))
	}
	d.Graphs = true
	for i, r := range runs {
		if got := f32bytes(forward(t, g, d, xs[i], r.f, r.h, r.w, r.off)); !bytes.Equal(got, want[i]) {
			t.Errorf("pass %d (%+v) with graphs differs from op by op", i, r)
		}
	}
	if d.replays != 4 || len(d.graphs) != 2 {
		t.Errorf("%d replays of %d recordings, want 4 of 2", d.replays, len(d.graphs))
	}
	d.Graphs = false
	if forward(t, g, d, xs[0], runs[0].f, runs[0].h, runs[0].w, runs[0].off); d.replays != 4 {
		t.Error("a pass with Graphs off replayed")
	}
}

// gpu opens a fresh GPU backend of storage type dt for t (closed at the
// end of the test, if not before), or skips the test where there is none.
func gpu(t *testing.T, dt cuda.DType) *cuda.Backend {
	t.Helper()
	testutil.RequireGPU(t)
	g, err := cuda.Open("cuda:0", dt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// fullReplica loads the full-size checkpoint ck on a fresh bf16 backend of
// GPU 0 (both closed at the end of the test) and returns it with that
// backend.
func fullReplica(t *testing.T, ck *Checkpoint) (Replica, *cuda.Backend) {
	t.Helper()
	b := gpu(t, cuda.BF16)
	r, err := NewReAE(b, FileSource{ck.ReAE})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return Replica{R: r, DiT: loadDiT(t, b, ck)}, b
}

// TestBackToBackRequestsGPU is TestBackToBackRequests on the GPU in bf16.
func TestBackToBackRequestsGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	backToBack(t, func() backend.Backend { return gpu(t, cuda.BF16) })
}

// TestWarmupGPU is TestWarmup on the GPU in bf16.
func TestWarmupGPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	warmupLeavesNothing(t, func() backend.Backend { return gpu(t, cuda.BF16) })
}

// TestRestoreBF16Floor restores a video end to end (ReAE, DiT, ReAE) with
// the tiny checkpoint on the GPU in bf16 and on the CPU in float32 and
// reports the PSNR between the two 8-bit outputs: the rounding floor of
// bf16 for these weights (an independent PyTorch run of the same network
// measures its own bf16-vs-float32 floor: scripts/bench_torch_swiftvr.py).
func TestRestoreBF16Floor(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := gpu(t, cuda.BF16)
	q := request{29, 320, 176, 640, 352, 8, 4}
	rg, dg := tinyModel(t, g)
	got := q.run(t, rg, dg)
	rc, dc := tinyModel(t, cpu.New(0))
	want := q.run(t, rc, dc)
	var se float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		se += e * e
	}
	p := 10 * math.Log10(255*255/(se/float64(len(want))))
	t.Logf("bf16 GPU against float32 CPU, end to end: PSNR %.2f dB", p)
	if p < 30 {
		t.Errorf("PSNR %.2f dB: far below bf16 rounding", p)
	}
}

// TestParallelGPU: 2 and 3 ranks sharing GPU 0 (device-to-device copies
// ordered by events, no host) give bitwise the frames of one Session on
// the GPU, with the tiny checkpoint and its DiT.
func TestParallelGPU(t *testing.T) {
	const w, h, ow, oh, frames = 40, 24, 64, 32, 53
	var ranks []Replica
	for range 3 {
		r, d := tinyModel(t, gpu(t, cuda.BF16))
		ranks = append(ranks, Replica{R: r, DiT: d})
	}
	opt := Options{Width: ow, Height: oh, ClipLen: 8, DiTOverlap: 1}
	v := video(frames, w, h, 7)
	runtime.LockOSThread()
	s, err := NewSession(ranks[0].R, ranks[0].DiT, w, h, frames, opt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := driveBatches(t, s, frames, v, w, h, ow, oh, 1)
	s.Close()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3} {
		p, err := NewParallel(ranks[:n], w, h, frames, opt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := driveBatches(t, p, frames, v, w, h, ow, oh, 3)
		st := p.Exchanged()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d ranks on one GPU give other frames than one", n)
		}
		for r, x := range st {
			if x.Staged != 0 || x.Sent == 0 {
				t.Errorf("%d ranks: rank %d sent %d messages, %d through the host", n, r, x.Sent, x.Staged)
			}
		}
	}
}

// TestParallelFullGPU is the reference workload with several ranks on one
// GPU, in one process (cuDNN's timed algorithm choice may differ between
// processes, so outputs are compared within one): the full-size synthetic
// checkpoint, 361 frames of 640x360 to 2560x1440, on 1, 2 and 3 ranks
// sharing GPU 0; every output frame must be bitwise the one rank's. It
// writes a 10 GB checkpoint and loads the DiT once per rank, so it runs
// only with VSR_FULL_SWIFTVR=1 (scripts/gpu.sh bench ranks; docs/GPU.md).
func TestParallelFullGPU(t *testing.T) {
	if os.Getenv("VSR_FULL_SWIFTVR") != "1" {
		t.Skip("set VSR_FULL_SWIFTVR=1 to run the full-size checkpoint")
	}
	const w, h, ow, oh, frames = 640, 360, 2560, 1440, 361
	ck := synthCheckpoint(t, "full")
	var ranks []Replica
	for range 3 {
		rep, _ := fullReplica(t, ck)
		ranks = append(ranks, rep)
	}
	v := video(frames, w, h, 3)
	opt := Options{Width: ow, Height: oh}
	hashes := func(e engine) ([][32]byte, time.Duration) {
		var hs [][32]byte
		start := time.Now()
		if err := driveEach(t, e, frames, v, w, h, ow, oh, 3, func(f []byte) { hs = append(hs, sha256.Sum256(f)) }); err != nil {
			t.Fatal(err)
		}
		return hs, time.Since(start)
	}
	runtime.LockOSThread()
	s, err := NewSession(ranks[0].R, ranks[0].DiT, w, h, frames, opt)
	if err != nil {
		t.Fatal(err)
	}
	hashes(s) // warm: kernels, algorithms, graphs
	s.Close()
	s, _ = NewSession(ranks[0].R, ranks[0].DiT, w, h, frames, opt)
	want, d1 := hashes(s)
	s.Close()
	runtime.UnlockOSThread()
	t.Logf("1 rank: %d frames in %v (RGB24 out, copied to the host)", len(want), d1)
	for _, n := range []int{2, 3} {
		p, err := NewParallel(ranks[:n], w, h, frames, opt)
		if err != nil {
			t.Fatal(err)
		}
		got, d := hashes(p)
		st := p.Exchanged()
		p.Close()
		if len(got) != frames {
			t.Fatalf("%d ranks: %d frames", n, len(got))
		}
		diff := 0
		for k := range got {
			if got[k] != want[k] {
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%d ranks on one GPU: %d of %d frames differ from one rank's", n, diff, frames)
		}
		var sent int64
		for _, x := range st {
			sent += x.SentBytes
		}
		t.Logf("%d ranks: %v, %d frames bitwise equal to one rank: %v; %.1f MiB exchanged", n, d, frames-diff, diff == 0, float64(sent)/(1<<20))
	}
}

// psnr8 compares 8-bit frames; maxDiff8 is their largest difference.
func psnr8(a, b []byte) float64 {
	var mse float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		mse += d * d
	}
	if mse == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/(mse/float64(len(a))))
}

func maxDiff8(a, b []byte) int {
	m := 0
	for i := range a {
		m = max(m, int(a[i])-int(b[i]), int(b[i])-int(a[i]))
	}
	return m
}

// TestSequenceFullGPU: sequence parallelism with the full-size synthetic
// checkpoint on ranks sharing GPU 0 (VSR_FULL_SWIFTVR=1,
// scripts/gpu.sh test with RUN=SequenceFullGPU; docs/GPU.md). It reports, against one rank:
//   - 53 frames of 640x360 to 2560x1440 (2 chunks) on 2, 3 and 4 ranks of
//     one chunk group: the DiT split by tokens and heads, the ReAE by height;
//     PSNR and largest difference of the RGB output, time, bytes exchanged;
//   - the DiT alone on a middle chunk's latents on 2, 3 and 4 ranks;
//   - the ReAE alone (DiT off) in 2 and 4 bands over ranks and with
//     --reae-bands on one device, in bf16 and in float32.
func TestSequenceFullGPU(t *testing.T) {
	if os.Getenv("VSR_FULL_SWIFTVR") != "1" {
		t.Skip("set VSR_FULL_SWIFTVR=1 to run the full-size checkpoint")
	}
	ck := synthCheckpoint(t, "full")
	var ranks []Replica
	var gpus []*cuda.Backend
	for range 4 {
		rep, b := fullReplica(t, ck)
		ranks, gpus = append(ranks, rep), append(gpus, b)
	}
	noDiT := make([]Replica, len(ranks))
	for i, r := range ranks {
		noDiT[i] = Replica{R: r.R}
	}
	run := func(e engine, v []byte, frames, w, h, ow, oh int) ([]byte, time.Duration) {
		for _, g := range gpus {
			g.ResetPeak()
		}
		start := time.Now()
		out, err := driveBatches(t, e, frames, v, w, h, ow, oh, 2)
		if err != nil {
			t.Fatal(err)
		}
		return out, time.Since(start)
	}
	one := func(rk Replica, v []byte, frames, w, h int, opt Options) ([]byte, time.Duration) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s, err := NewSession(rk.R, rk.DiT, w, h, frames, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return run(s, v, frames, w, h, opt.Width, opt.Height)
	}
	group := func(rs []Replica, v []byte, frames, w, h int, opt Options) ([]byte, time.Duration, []parallel.Stats) {
		opt.Sequence = len(rs)
		p, err := NewParallel(rs, w, h, frames, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		out, d := run(p, v, frames, w, h, opt.Width, opt.Height)
		return out, d, p.Exchanged()
	}
	sent := func(st []parallel.Stats) float64 {
		var n int64
		for _, x := range st {
			n += x.SentBytes
		}
		return float64(n) / (1 << 20)
	}
	const w, h, ow, oh, frames = 640, 360, 2560, 1440, 53
	v := video(frames, w, h, 3)
	opt := Options{Width: ow, Height: oh}
	one(ranks[0], v, frames, w, h, opt) // warm: kernels, algorithms, graphs
	want, d1 := one(ranks[0], v, frames, w, h, opt)
	t.Logf("2560x1440, %d frames (2 chunks), 1 rank: %v", frames, d1)
	for _, n := range []int{2, 3, 4} {
		group(ranks[:n], v, frames, w, h, opt) // warm each rank's shapes
		got, d, st := group(ranks[:n], v, frames, w, h, opt)
		if len(got) != len(want) {
			t.Fatalf("%d ranks: %d bytes, want %d", n, len(got), len(want))
		}
		p := psnr8(got, want)
		t.Logf("2560x1440, sequence over %d ranks: %v; RGB PSNR %.2f dB against one rank, largest difference %d; %.1f MiB exchanged (%.1f MiB per rank per chunk)",
			n, d, p, maxDiff8(got, want), sent(st), sent(st)/float64(n)/2)
		if p < 30 {
			t.Errorf("%d ranks: PSNR %.2f dB against one rank: more than rounding", n, p)
		}
	}
	// The DiT alone on a middle chunk's latents (7 x 90 x 160): v on P
	// ranks against one.
	x := randLatents(7*90*160*48, 9)
	runtime.LockOSThread()
	v1 := forward(t, gpus[0], ranks[0].DiT, x, 7, 90, 160, 7)
	runtime.UnlockOSThread()
	for _, n := range []int{2, 3, 4} {
		var dits []*DiT
		for _, r := range ranks[:n] {
			dits = append(dits, r.DiT)
		}
		start := time.Now()
		vs, st := shardedForward(t, dits, x, 7, 90, 160, 7)
		t.Logf("DiT of one 1440p chunk (25200 tokens) on %d ranks: %v, v's relative difference to one rank %.3g (rank 0), %.1f MiB sent per rank", n, time.Since(start), rel(vs[0], v1), float64(st[0].SentBytes)/(1<<20))
	}
	// The ReAE alone.
	wantAE, dAE := one(noDiT[0], v, frames, w, h, opt)
	t.Logf("ReAE only, 1 rank: %v", dAE)
	for _, n := range []int{2, 4} {
		group(noDiT[:n], v, frames, w, h, opt)
		got, d, st := group(noDiT[:n], v, frames, w, h, opt)
		t.Logf("ReAE only, %d bands over ranks: %v; PSNR %.2f dB, largest difference %d; %.1f MiB halo exchanged", n, d, psnr8(got, wantAE), maxDiff8(got, wantAE), sent(st))
		bo := opt
		bo.Bands = n
		got, d = one(noDiT[0], v, frames, w, h, bo)
		t.Logf("ReAE only, %d bands on one device (--reae-bands): %v; PSNR %.2f dB, largest difference %d", n, d, psnr8(got, wantAE), maxDiff8(got, wantAE))
	}
	// The ReAE in float32 (FMA math, no TF32): bands over ranks and on one
	// device against whole frames, to separate the scheme from bf16
	// rounding under other convolution algorithms.
	var f32 []Replica
	for range 2 {
		r, err := NewReAE(gpu(t, cuda.F32), FileSource{ck.ReAE})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		f32 = append(f32, Replica{R: r})
	}
	want32, _ := one(f32[0], v, frames, w, h, opt)
	got32, _, _ := group(f32, v, frames, w, h, opt)
	t.Logf("ReAE only in float32, 2 bands over ranks: PSNR %.2f dB against whole frames, largest difference %d", psnr8(got32, want32), maxDiff8(got32, want32))
	bo := opt
	bo.Bands = 2
	got32, _ = one(f32[0], v, frames, w, h, bo)
	t.Logf("ReAE only in float32, 2 bands on one device: PSNR %.2f dB against whole frames, largest difference %d", psnr8(got32, want32), maxDiff8(got32, want32))
}

// TestSequenceMemoryGPU: 9 frames to 3840x2160 and to 7680x4320 with the
// full-size synthetic checkpoint on one rank, on 2 ranks of GPU 0 in
// sequence and on one rank with the ReAE in 4 bands: each rank's working
// set (the peak of memory in use above what was in use before the
// request: the weights are not counted), time and PSNR against one rank.
// The DiT runs op by op in all three (sequence parallelism cannot record
// graphs), so that no recording's memory counts for one and not another.
func TestSequenceMemoryGPU(t *testing.T) {
	if os.Getenv("VSR_FULL_SWIFTVR") != "1" {
		t.Skip("set VSR_FULL_SWIFTVR=1 to run the full-size checkpoint")
	}
	ck := synthCheckpoint(t, "full")
	var ranks []Replica
	var gpus []*cuda.Backend
	for range 2 {
		rep, b := fullReplica(t, ck)
		rep.DiT.Graphs = false
		ranks, gpus = append(ranks, rep), append(gpus, b)
	}
	var base []int64
	run := func(e engine, v []byte, frames, w, h, ow, oh int) ([]byte, time.Duration) {
		base = base[:0]
		for _, g := range gpus {
			g.ResetPeak()
			base = append(base, g.InUse())
		}
		start := time.Now()
		out, err := driveBatches(t, e, frames, v, w, h, ow, oh, 2)
		if err != nil {
			t.Fatal(err)
		}
		return out, time.Since(start)
	}
	peak := func() string {
		var s []string
		for i, g := range gpus {
			s = append(s, fmt.Sprintf("rank %d %.1f GiB", i, float64(g.PeakInUse()-base[i])/(1<<30)))
		}
		return strings.Join(s, ", ")
	}
	const frames = 9
	for _, sz := range [][4]int{{960, 540, 3840, 2160}, {1920, 1080, 7680, 4320}} {
		v := video(frames, sz[0], sz[1], 5)
		o := Options{Width: sz[2], Height: sz[3]}
		one := func(o Options) ([]byte, time.Duration) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			s, err := NewSession(ranks[0].R, ranks[0].DiT, sz[0], sz[1], frames, o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			return run(s, v, frames, sz[0], sz[1], sz[2], sz[3])
		}
		two := func() ([]byte, time.Duration) {
			so := o
			so.Sequence = 2
			p, err := NewParallel(ranks, sz[0], sz[1], frames, so)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			return run(p, v, frames, sz[0], sz[1], sz[2], sz[3])
		}
		bo := o
		bo.Bands = 4
		one(o) // warm: this size's algorithms
		ref, d := one(o)
		t.Logf("%dx%d, %d frames, 1 rank: %v; working set %s", sz[2], sz[3], frames, d, peak())
		two()
		got, d := two()
		t.Logf("%dx%d, sequence over 2 ranks: %v; working set %s; PSNR %.2f dB against one rank", sz[2], sz[3], d, peak(), psnr8(got, ref))
		one(bo)
		got, d = one(bo)
		t.Logf("%dx%d, 1 rank, ReAE in 4 bands: %v; working set %s; PSNR %.2f dB against whole frames", sz[2], sz[3], d, peak(), psnr8(got, ref))
	}
}

// TestSequenceGPU: the tiny checkpoint in sequence over 2 ranks of GPU 0,
// with and without chunk groups, against one rank (PSNR of the RGB
// output: the DiT's GEMMs over other row counts may round differently).
func TestSequenceGPU(t *testing.T) {
	const w, h, ow, oh, frames = 40, 24, 64, 64, 41
	var ranks []Replica
	for range 4 {
		r, d := tinyModel(t, gpu(t, cuda.BF16))
		ranks = append(ranks, Replica{R: r, DiT: d})
	}
	opt := Options{Width: ow, Height: oh, ClipLen: 8, DiTOverlap: 1}
	v := video(frames, w, h, 7)
	runtime.LockOSThread()
	s, err := NewSession(ranks[0].R, ranks[0].DiT, w, h, frames, opt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := driveBatches(t, s, frames, v, w, h, ow, oh, 1)
	s.Close()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4} {
		o := opt
		o.Sequence = 2
		p, err := NewParallel(ranks[:n], w, h, frames, o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := driveBatches(t, p, frames, v, w, h, ow, oh, 2)
		st := p.Exchanged()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		ps := psnr8(got, want)
		t.Logf("%d ranks in groups of 2: PSNR %.2f dB against one rank, largest difference %d", n, ps, maxDiff8(got, want))
		if ps < 40 {
			t.Errorf("%d ranks in groups of 2: PSNR %.2f dB", n, ps)
		}
		for r, x := range st {
			if x.Staged != 0 || x.Sent == 0 {
				t.Errorf("rank %d sent %d messages, %d through the host", r, x.Sent, x.Staged)
			}
		}
	}
}

// TestResumeGPU is TestResumeSession and TestResumeParallel on GPU 0 in
// bf16 with the tiny checkpoint and its DiT: a Session on whole frames and
// in 2 ReAE bands, 2 ranks sharing the GPU (chunk parallelism) and 2 ranks
// in one sequence group, each stopped after every batch and resumed in a
// new session, bitwise as a run never stopped.
func TestResumeGPU(t *testing.T) {
	const w, h, ow, oh, frames = 40, 24, 64, 64, 53
	var ranks []Replica
	for range 2 {
		r, d := tinyModel(t, gpu(t, cuda.BF16))
		ranks = append(ranks, Replica{R: r, DiT: d})
	}
	opt := Options{Width: ow, Height: oh, ClipLen: 8, DiTOverlap: 1}
	bands := opt
	bands.Bands = 2
	seq := opt
	seq.Sequence = 2
	for _, c := range []struct {
		name string
		open func(t *testing.T) resumable
	}{
		{"one rank", sessions(ranks[0].R, ranks[0].DiT, w, h, frames, opt)},
		{"one rank in 2 bands", sessions(ranks[0].R, ranks[0].DiT, w, h, frames, bands)},
		{"2 ranks", parallels(ranks, w, h, frames, opt)},
		{"2 ranks in sequence", parallels(ranks, w, h, frames, seq)},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.LockOSThread() // a Session runs on this thread
			defer runtime.UnlockOSThread()
			resumeCase{frames: frames, w: w, h: h, ow: ow, oh: oh, open: c.open}.check(t)
		})
	}
}

// TestResumeFullGPU is issue 38's reference workload: the full-size
// synthetic checkpoint, 361 frames of 640x360 to 2560x1440, on one rank,
// on 2 ranks sharing GPU 0 (chunk parallelism) and on 2 ranks in one
// sequence group, each stopped after its first, a middle and its last
// batch but one and resumed in a new session, every frame bitwise the one
// of a run never stopped in the same layout. It logs the size of each
// state (and what StateBytes says of one at 1440p) and, on one rank, the
// time of a run that saves its states against one that does not. Like
// TestParallelFullGPU, it runs only with VSR_FULL_SWIFTVR=1.
func TestResumeFullGPU(t *testing.T) {
	if os.Getenv("VSR_FULL_SWIFTVR") != "1" {
		t.Skip("set VSR_FULL_SWIFTVR=1 to run the full-size checkpoint")
	}
	const w, h, ow, oh, frames = 640, 360, 2560, 1440, 361
	ck := synthCheckpoint(t, "full")
	var ranks []Replica
	for range 2 {
		rep, _ := fullReplica(t, ck)
		ranks = append(ranks, rep)
	}
	opt := Options{Width: ow, Height: oh}
	cs, _ := PlanChunks(frames, 24)
	last := historyTaken(cs[len(cs)-1], Options{ClipLen: 24})
	t.Logf("StateBytes at %dx%d in bf16: %d before a middle chunk (dit-overlap 0: no history), %d before the last (%d history latents)",
		ow, oh, StateBytes(ck.Dims, ow, oh, 0, 2), StateBytes(ck.Dims, ow, oh, last, 2), last)
	seq := opt
	seq.Sequence = 2
	for _, c := range []struct {
		name string
		open func(t *testing.T) resumable
		warm bool
	}{
		{"one rank", sessions(ranks[0].R, ranks[0].DiT, w, h, frames, opt), true},
		{"2 ranks", parallels(ranks, w, h, frames, opt), false},
		{"2 ranks in sequence", parallels(ranks, w, h, frames, seq), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.LockOSThread() // a Session runs on this thread
			defer runtime.UnlockOSThread()
			resumeCase{frames: frames, w: w, h: h, ow: ow, oh: oh, open: c.open, spread: true, warm: c.warm}.check(t)
		})
	}
}

package swiftvr

import (
	"math"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cuda"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// ditFLOPs counts the multiply-adds (x2) of one Forward on an f x h x w
// token grid: every linear layer, the owned queries of every window
// against its keys, and the cross-attention to the prompt.
func ditFLOPs(d Dims, prompt int, g backend.Grid) float64 {
	L, D, F := float64(g.Tokens()), float64(d.Dim), float64(d.FFNDim)
	perBlock := 2*L*D*D*6 + 2*L*D*F*2 + 4*L*float64(prompt)*D
	var total float64
	for i := 0; i < d.Layers; i++ {
		w := windows(g.H, g.W, i%2 == 1)
		wh, ww := min(w.Size, g.H), min(w.Size, g.W)
		att := 4 * L * float64(g.F*wh*ww) * D // every token attends to one window
		total += perBlock + att
	}
	return total + 2*L*float64(d.InChannels*4)*D + 2*L*D*float64(d.OutChannels*4)
}

// BenchmarkDiTChunk times the DiT on the GPU in bf16 for the chunk shapes
// of the reference workload (2560x1440 output: 90x160 latents; 6 latents
// for a middle chunk, 7 for the first) and a middle chunk of about half
// as many tokens (2560x720 output, padded to 736 rows: 46x160 latents),
// with the checkpoint in $VSR_SWIFTVR_CKPT (e.g. `vsr checkpoint synth
// --preset full`), replaying a recorded CUDA graph and op by op. The pool
// peak leaves out the graph's own memory. With $VSR_DIT_FP8 set, the same
// again with the blocks' linear layers in fp8.
func BenchmarkDiTChunk(b *testing.B) {
	dir := os.Getenv("VSR_SWIFTVR_CKPT")
	if dir == "" {
		b.Skip("set VSR_SWIFTVR_CKPT to a SwiftVR checkpoint directory")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.Init(); err != nil {
		b.Skip("no CUDA driver: ", err)
	}
	g, err := cuda.Open("cuda:0", cuda.BF16)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	ck, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer ck.Close()
	prompt, err := ck.PromptEmbedding()
	if err != nil {
		b.Fatal(err)
	}
	precs := []Precision{BF16}
	if os.Getenv("VSR_DIT_FP8") != "" {
		precs = append(precs, FP8)
	}
	for _, prec := range precs {
		start := time.Now()
		d, err := NewDiT(g, FileSource{ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt, prec)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%v: loaded in %v, device pool peak %.2f GiB, device memory in use %.2f GiB", prec, time.Since(start),
			float64(g.PeakBytes())/(1<<30), usedGiB(g))
		b.Run(prec.String(), func(b *testing.B) { benchChunks(b, g, d, ck, prompt) })
		d.Close()
	}
}

// usedGiB is the device memory in use (cuMemGetInfo: this process's, on
// a GPU of its own).
func usedGiB(g *cuda.Backend) float64 {
	free, total, err := g.Context().MemInfo()
	if err != nil {
		return math.NaN()
	}
	return float64(total-free) / (1 << 30)
}

// benchChunks runs BenchmarkDiTChunk's cases on d.
func benchChunks(b *testing.B, g *cuda.Backend, d *DiT, ck *Checkpoint, prompt []float32) {
	for _, c := range []struct {
		name   string
		f, h   int // latents; rows of 160 columns
		graphs bool
	}{{"middle", 6, 90, true}, {"middle", 6, 90, false}, {"first", 7, 90, true}, {"first", 7, 90, false},
		{"middle-2560x736", 6, 46, true}, {"middle-2560x736", 6, 46, false}} {
		f, h := c.f, c.h
		name := c.name + map[bool]string{true: "/graph", false: "/ops"}[c.graphs]
		b.Run(name, func(b *testing.B) {
			d.Graphs = c.graphs
			s := backend.Shape{N: f, H: h, W: 160, C: ck.Dims.InChannels}
			x, err := g.Upload(s, randLatents(s.Elems(), 1))
			if err != nil {
				b.Fatal(err)
			}
			defer x.Free()
			run := func() {
				v, err := d.Forward(x, 7)
				if err != nil {
					b.Fatal(err)
				}
				v.Free()
				if err := g.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			g.ResetPeak()
			run() // plans, kernels, the recording
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run()
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			flops := ditFLOPs(ck.Dims, len(prompt)/ck.Dims.TextDim, backend.Grid{F: f, H: h / 2, W: 80})
			b.ReportMetric(sec, "s/chunk")
			b.ReportMetric(flops/sec/1e12, "TFLOP/s")
			b.ReportMetric(float64(g.PeakBytes())/(1<<30), "GiB-pool-peak")
		})
	}
}

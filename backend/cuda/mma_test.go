package cuda

import (
	"testing"

	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// mmaRateSource holds two kernels that only issue warp-level tensor-core
// instructions (mma.sync, the instruction vsr's attention kernel is built
// on) from registers: bf16 m16n8k16 and e4m3 m16n8k32, each warp with 8
// independent accumulators. Their rates bound what an attention kernel of
// that structure can reach in each format, whatever its memory traffic.
var mmaRateSource = Source{Name: "mma_rate.cu", Code: `
typedef unsigned int u32;
extern "C" __global__ void mma_bf16(float* out, int iters) {
    u32 a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = 0x3f803f80u ^ (threadIdx.x << i);
    for (int i = 0; i < 2; i++) b[i] = 0x3f803f80u ^ (threadIdx.x << (i + 4));
    float c[8][4] = {};
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0;
    for (int j = 0; j < 8; j++) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void mma_e4m3(float* out, int iters) {
    u32 a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = 0x38383838u ^ (threadIdx.x << i);
    for (int i = 0; i < 2; i++) b[i] = 0x38383838u ^ (threadIdx.x << (i + 4));
    float c[8][4] = {};
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0;
    for (int j = 0; j < 8; j++) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
`}

// BenchmarkMMARate measures the tensor-core rate of warp-level mma.sync in
// bf16 and in e4m3 (reported as TFLOP/s): on Hopper, fp8's doubled rate
// is reached through the warpgroup instructions (wgmma) that cuBLASLt
// uses; whether mma.sync gets it decides whether an fp8 variant of vsr's
// attention kernel can be faster than its bf16 one.
func BenchmarkMMARate(bb *testing.B) {
	b := open(bb, BF16)
	if err := b.fp8Check(); err != nil {
		bb.Skip(err)
	}
	const threads, iters = 256, 4096
	blocks := b.sms * 8
	out, err := b.ctx.Alloc(blocks * threads * 4)
	if err != nil {
		bb.Fatal(err)
	}
	defer out.Free()
	start, err := b.ctx.NewEvent(0)
	if err != nil {
		bb.Fatal(err)
	}
	defer start.Close()
	end, err := b.ctx.NewEvent(0)
	if err != nil {
		bb.Fatal(err)
	}
	defer end.Close()
	for _, k := range []struct {
		name  string
		flops float64 // per mma instruction
	}{{"mma_bf16", 16 * 8 * 16 * 2}, {"mma_e4m3", 16 * 8 * 32 * 2}} {
		bb.Run(k.name, func(bb *testing.B) {
			fn, err := b.kernel(&mmaRateSource, k.name)
			if err != nil {
				bb.Fatal(err)
			}
			run := func() {
				if err := fn.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(blocks)}, Block: cu.Dim3{X: threads}, Stream: b.compute}, out.Ptr(), int32(iters)); err != nil {
					bb.Fatal(err)
				}
			}
			run()
			best := 0.0
			for i := 0; i < max(bb.N, 5); i++ {
				if err := start.Record(b.compute); err != nil {
					bb.Fatal(err)
				}
				run()
				if err := end.Record(b.compute); err != nil {
					bb.Fatal(err)
				}
				if err := end.Synchronize(); err != nil {
					bb.Fatal(err)
				}
				d, err := cu.ElapsedTime(start, end)
				if err != nil {
					bb.Fatal(err)
				}
				warps := float64(blocks * threads / 32)
				best = max(best, warps*iters*8*k.flops/d.Seconds()/1e12)
			}
			bb.ReportMetric(best, "TFLOP/s")
		})
	}
}

// conv3x3_bias_prelu_f16: a 3x3 convolution (zero padding 1, stride 1) fused
// with its bias and PReLU, for NHWC fp16 activations. Header-free like
// kernels.cu: fp16 values are unsigned short, tensor-core math is inline PTX
// (ldmatrix + mma.sync m16n8k16, fp32 accumulation), loads are cp.async.
//
//   y[n,h,w,k] = fp16(prelu_k(bias[k] + sum_{ky,kx,c} x[n,h+ky-1,w+kx-1,c] * wt[k,ky,kx,c]))
//   prelu_k(v) = v >= 0 ? v : slope[nslope == 1 ? 0 : k] * v
//
// x is (n,h,w,c) fp16, wt is KRSC (k,3,3,c) fp16, bias and slope float32.
// bias == 0 means no bias; slope == 0 means no activation (plain conv+bias).
// Shapes: c a multiple of 16 with c <= 64; k a multiple of 8 with k <= 64.
// c = 64 with k = 64 or k = 48 (the compact model's convs) have unrolled fast
// paths; other shapes run a generic path (k < 64 computes 64 channels and
// drops the rest). x, wt and y 16-byte aligned. Bad arguments or too little
// dynamic shared memory: the kernel returns without writing.
//
// Implicit GEMM: M = output pixels, N = output channels, K-dim = 9*c. A tile
// is 2 output rows x 128 consecutive pixels x all channels. The CTA keeps the
// whole filter in shared memory (loaded once) and stages the 4 input rows a
// tile needs (130 pixels each, halo and zero padding included) with cp.async,
// double-buffered: two loader warps fetch the next tile's rows while 8 compute
// warps work on this one (one barrier per tile hands the buffers over). Each
// compute warp computes 64 pixels of one row x 32 channels (4 x 4 m16n8
// tiles; 4 x 3 for k = 48); its A fragments come by ldmatrix straight from
// the staged rows, shifted per tap (the im2col is implicit). The epilogue
// adds the bias, applies PReLU, rounds to fp16 and stores from registers:
// 16-byte stores (a 4x4 transpose inside each quad) when a warp holds a
// multiple of 32 channels.
//
// Shared memory (every row 128-byte aligned; 16-byte chunks XOR-swizzled by
// row & 7, so ldmatrix and the cp.async writes are free of bank conflicts):
//   filter: 64 rows (output channels) x 9 taps x 128 bytes (64 channels)
//   stages: 2 x 4 input rows x 130 pixels x 128 bytes
//
// Launch: block CF_THREADS = 320 threads (8 compute warps + 2 loader warps);
// grid min(tiles, multiprocessors), persistent: CTA b does tiles b,
// b + gridDim.x, ..., where tiles = n * ceil(h/2) * ceil(w/128); dynamic
// shared memory CF_SMEM = 206976 bytes, which needs cuFuncSetAttribute(
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 206976) first. One CTA
// per multiprocessor.
//
// Build-time variants (NVRTC -D options; the benchmark in convfused_test.go
// times them): CF_PRODUCER = loader warps (0: every warp loads its share at
// the top of each tile; block 32 * (4 * CF_NG + CF_PRODUCER) threads),
// CF_NG = 1 for 4 compute warps of 64 pixels x 64 channels, CF_TM = 64 for
// tiles of 4 rows x 64 pixels. The defaults were the fastest measured
// (docs/BENCHMARKS.md, "Notes moved from code comments").

typedef unsigned short u16;
typedef unsigned int u32;

#ifndef CF_TM
#define CF_TM 128                           // output pixels per tile row: 128 or 64
#endif
#define CF_ROWS (256 / CF_TM)               // output rows per tile (a warp row: 64 pixels)
#ifndef CF_NG
#define CF_NG 2                             // warp columns: 2 (8 warps) or 1 (4 warps)
#endif
#ifndef CF_PRODUCER
#define CF_PRODUCER 2                       // loader warps (0: every warp loads)
#endif
#define CF_CWARPS (4 * CF_NG)               // compute warps: 4 warp rows x CF_NG columns
#define CF_THREADS (32 * (CF_CWARPS + CF_PRODUCER))
#define CF_RP (CF_TM + 2)                   // staged pixels per input row
#define CF_PIXB 128                         // staged bytes per pixel (64 channels)
#define CF_ROWB (CF_RP * CF_PIXB)           // 16640 (CF_TM 128)
#define CF_STAGEB ((CF_ROWS + 2) * CF_ROWB) // 66560 (CF_TM 128)
#define CF_FROWB (9 * 128)                  // 1152 bytes per filter row
#define CF_FILTB (64 * CF_FROWB)            // 73728
#define CF_SMEM (CF_FILTB + 2 * CF_STAGEB + 128) // 206976 (CF_TM 128), with room to align

// Timing probes for the benchmark (both 0 in real use): CF_PROBE_NOLOAD
// stages only each CTA's first tile (later tiles compute on stale rows);
// CF_PROBE_NOSTORE skips the output stores.
#ifndef CF_PROBE_NOLOAD
#define CF_PROBE_NOLOAD 0
#endif
#ifndef CF_PROBE_NOSTORE
#define CF_PROBE_NOSTORE 0
#endif

__device__ __forceinline__ u32 cf_smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// cp_async16 copies 16 bytes global -> shared; n = 0 writes 16 zero bytes.
__device__ __forceinline__ void cf_cp_async16(u32 dst, const void* src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cf_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cf_cp_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void cf_cp_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void cf_ldsm_x4(u32 a, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}
__device__ __forceinline__ void cf_ldsm_x2(u32 a, u32& r0, u32& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(a));
}
__device__ __forceinline__ void cf_mma(float* c, const u32* a, const u32* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ u32 cf_shfl_xor(u32 v, int m) {
    u32 r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(m));
    return r;
}
// cf_pack rounds two floats to fp16: lo in the low half (lower address).
__device__ __forceinline__ u32 cf_pack(float lo, float hi) {
    u16 a, b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(a) : "f"(lo));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(hi));
    return (u32)a | ((u32)b << 16);
}
__device__ __forceinline__ void cf_st16(u16* p, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// cf_stage queues the cp.async copies of tile t's 4 input rows into the
// stage at shared address sb: staged row s is input row h0-1+s, staged
// pixel j is input column w0-1+j, chunk ch (channels 8ch..8ch+7) of pixel j
// lands at chunk ch ^ (j & 7). Out-of-image pixels are zero-filled.
template <int CC>
__device__ __forceinline__ void cf_stage(const u16* __restrict__ x, int t, u32 sb, int H, int W, int C, int HP, int WS,
                                         int tid, int nthr) {
    const int ch8 = CC ? CC * 2 : (C >> 3); // 16-byte chunks per pixel
    const int ppi = nthr / ch8;             // pixels per pass
    const int ws = t % WS, r = t / WS;
    const int hp = r % HP, nn = r / HP;
    const int h0 = hp * CF_ROWS, w0 = ws * CF_TM;
    const int ch = tid % ch8, jj = tid / ch8;
    if (jj >= ppi) return;
#pragma unroll
    for (int s = 0; s < CF_ROWS + 2; s++) {
        const int hh = h0 - 1 + s;
        const bool rowok = hh >= 0 && hh < H;
        const u16* rowp = x + ((long long)nn * H + (rowok ? hh : 0)) * W * C + ch * 8;
        const u32 srow = sb + s * CF_ROWB;
#pragma unroll 5
        for (int j = jj; j < CF_RP; j += ppi) {
            const int ww = w0 - 1 + j;
            const bool ok = rowok && ww >= 0 && ww < W;
            const u16* src = ok ? rowp + (long long)ww * C : x;
            cf_cp_async16(srow + j * CF_PIXB + ((ch ^ (j & 7)) << 4), src, ok ? 16 : 0);
        }
    }
}

// cf_body is the kernel for NT n8-tiles per warp (CF_NG warp columns of
// 8*NT channels) and CC = c/16 (0: c known at run time only).
template <int NT, int CC>
__device__ __forceinline__ void cf_body(const u16* __restrict__ x, const u16* __restrict__ wt,
                                        const float* __restrict__ bias, const float* __restrict__ slope, int nslope,
                                        u16* __restrict__ y, int N, int H, int W, int C, int K, u32 sm) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mg = warp & 3, ng = warp >> 2;
    const int ncc = CC ? CC : (C >> 4);
    const int ch8 = CC ? CC * 2 : (C >> 3);
    const u32 fb = sm, sb0 = sm + CF_FILTB;
    const int HP = (H + CF_ROWS - 1) / CF_ROWS, WS = (W + CF_TM - 1) / CF_TM;
    const int ntiles = N * HP * WS;
    if ((int)blockIdx.x >= ntiles) return;

    // The filter: row n (output channel) at fb + n*1152, tap at +tap*128,
    // chunk ch at (ch ^ (n & 7))*16. Rows n >= K are zero.
    {
        const int per_row = 9 * ch8, total = CF_NG * NT * 8 * per_row;
        for (int i = tid; i < total; i += CF_THREADS) {
            const int row = i / per_row, q = i - row * per_row;
            const int tap = q / ch8, ch = q - tap * ch8;
            const bool ok = row < K;
            const u16* src = ok ? wt + ((long long)row * 9 + tap) * C + ch * 8 : wt;
            cf_cp_async16(fb + row * CF_FROWB + tap * 128 + ((ch ^ (row & 7)) << 4), src, ok ? 16 : 0);
        }
    }

    // Per-lane fragment addresses. A (16 pixels x 16 channels, ldmatrix x4):
    // lane l points at pixel row (l & 7) + 8*((l >> 3) & 1), channel chunk
    // l >> 4; B (8*2 channels x 16, x4): lane l points at channel
    // (l & 7) + 8*((l >> 4) & 1), chunk (l >> 3) & 1. The chunk of channel
    // step cc is reached by XOR with cc << 5 (rows are 128-byte aligned).
    const int g = lane >> 2, tq = lane & 3;
    const int r_out = mg / (CF_TM / 64), pw = (mg % (CF_TM / 64)) * 64;
    const int lpix = (lane & 7) + ((lane >> 3) & 1) * 8, hi = lane >> 4;
    u32 aoff[3];
#pragma unroll
    for (int kx = 0; kx < 3; kx++) {
        const int j = pw + kx + lpix;
        aoff[kx] = r_out * CF_ROWB + j * CF_PIXB + ((hi ^ (j & 7)) << 4);
    }
    const int nbase = ng * NT * 8;
    const int nl = nbase + (lane & 7) + ((lane >> 4) & 1) * 8;
    const u32 bptr = fb + nl * CF_FROWB + ((((lane >> 3) & 1) ^ (lane & 7)) << 4);

    // Bias and slope of this thread's channels nbase + nt*8 + 2*tq + e.
    float bv[NT][2], sv[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int chn = nbase + nt * 8 + 2 * tq + e;
            const bool ok = chn < K;
            bv[nt][e] = (bias && ok) ? bias[chn] : 0.0f;
            sv[nt][e] = slope ? (ok ? slope[nslope == 1 ? 0 : chn] : 0.0f) : 1.0f;
        }
    }

    int t = blockIdx.x, buf = 0;
#if CF_PRODUCER
    // Warps CF_CWARPS.. load (the next tile's rows, while the others
    // compute); one barrier per tile hands the buffers over.
    const bool producer = warp >= CF_CWARPS;
    const int ltid = tid - 32 * CF_CWARPS;
    if (producer) cf_stage<CC>(x, t, sb0, H, W, C, HP, WS, ltid, 32 * CF_PRODUCER);
    cf_cp_commit();
    cf_cp_wait0();
    __syncthreads();
    for (; t < ntiles; t += gridDim.x, buf ^= 1) {
        const int tn = t + gridDim.x;
        if (producer) {
            if (tn < ntiles && !CF_PROBE_NOLOAD) cf_stage<CC>(x, tn, sb0 + (buf ^ 1) * CF_STAGEB, H, W, C, HP, WS, ltid, 32 * CF_PRODUCER);
            cf_cp_commit();
            cf_cp_wait0();
        } else {
#else
    cf_stage<CC>(x, t, sb0, H, W, C, HP, WS, tid, CF_THREADS);
    cf_cp_commit();
    for (; t < ntiles; t += gridDim.x, buf ^= 1) {
        const int tn = t + gridDim.x;
        __syncthreads(); // every warp is done with the other buffer
        if (tn < ntiles && !CF_PROBE_NOLOAD) cf_stage<CC>(x, tn, sb0 + (buf ^ 1) * CF_STAGEB, H, W, C, HP, WS, tid, CF_THREADS);
        cf_cp_commit();
        cf_cp_wait1(); // this tile's rows (and the filter) have landed
        __syncthreads();
        {
#endif
        const u32 sb = sb0 + buf * CF_STAGEB;
        float acc[4][NT][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][nt][e] = 0.0f;

#pragma unroll
        for (int tap = 0; tap < 9; tap++) {
            const int ky = tap / 3, kx = tap % 3;
#pragma unroll
            for (int cc = 0; cc < (CC ? CC : 4); cc++) {
                if (!CC && cc >= ncc) break;
                u32 bf[NT][2];
                const u32 ba = (bptr ^ (u32)(cc << 5)) + tap * 128;
#pragma unroll
                for (int b = 0; b < NT / 2; b++)
                    cf_ldsm_x4(ba + b * 16 * CF_FROWB, bf[2 * b][0], bf[2 * b][1], bf[2 * b + 1][0], bf[2 * b + 1][1]);
                if (NT & 1) cf_ldsm_x2(ba + (NT / 2) * 16 * CF_FROWB, bf[NT - 1][0], bf[NT - 1][1]);
                const u32 aa = ((sb + aoff[kx]) ^ (u32)(cc << 5)) + ky * CF_ROWB;
                u32 af[4][4];
#pragma unroll
                for (int i = 0; i < 4; i++) cf_ldsm_x4(aa + i * 16 * CF_PIXB, af[i][0], af[i][1], af[i][2], af[i][3]);
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) cf_mma(acc[i][nt], af[i], bf[nt]);
            }
        }

        // Epilogue: accumulator e of tile (i, nt) is pixel 16i + g + 8*(e >> 1),
        // channel nbase + nt*8 + 2*tq + (e & 1).
        const int ws = t % WS, rr = t / WS;
        const int hp = rr % HP, nn = rr / HP;
        const int hrow = hp * CF_ROWS + r_out, wbase = ws * CF_TM + pw;
        if (hrow < H) { // uniform per warp
            u16* yrow = y + ((long long)nn * H + hrow) * W * K;
#pragma unroll
            for (int i = 0; i < 4; i++) {
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int wcol = wbase + i * 16 + g + half * 8;
                    u32 v[(NT + 3) / 4 * 4];
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        float a0 = acc[i][nt][2 * half] + bv[nt][0];
                        float a1 = acc[i][nt][2 * half + 1] + bv[nt][1];
                        a0 = a0 < 0.0f ? a0 * sv[nt][0] : a0;
                        a1 = a1 < 0.0f ? a1 * sv[nt][1] : a1;
                        v[nt] = cf_pack(a0, a1);
                    }
                    if (NT % 4 == 0) {
#pragma unroll
                        for (int q = 0; q < NT / 4; q++) {
                            // 4x4 transpose in the quad: lane tq then holds
                            // channels nbase + 32q + 8tq .. +7 of its pixel.
                            u32* u = v + 4 * q;
                            const bool up = tq & 2, odd = tq & 1;
                            u32 s0 = up ? u[0] : u[2], s1 = up ? u[1] : u[3];
                            u32 r0 = cf_shfl_xor(s0, 2), r1 = cf_shfl_xor(s1, 2);
                            if (up) { u[0] = r0; u[1] = r1; } else { u[2] = r0; u[3] = r1; }
                            s0 = odd ? u[0] : u[1];
                            s1 = odd ? u[2] : u[3];
                            r0 = cf_shfl_xor(s0, 1);
                            r1 = cf_shfl_xor(s1, 1);
                            if (odd) { u[0] = r0; u[2] = r1; } else { u[1] = r0; u[3] = r1; }
                            const int chn = nbase + 32 * q + tq * 8;
                            if (wcol < W && chn < K && (!CF_PROBE_NOSTORE || (u[0] ^ u[1] ^ u[2] ^ u[3]) == 0x12345678u))
                                cf_st16(yrow + (long long)wcol * K + chn, u[0], u[1], u[2], u[3]);
                        }
                    } else if (wcol < W) {
#pragma unroll
                        for (int nt = 0; nt < NT; nt++) {
                            const int chn = nbase + nt * 8 + 2 * tq;
                            if (chn < K && (!CF_PROBE_NOSTORE || v[nt] == 0x12345678u)) *(u32*)(yrow + (long long)wcol * K + chn) = v[nt];
                        }
                    }
                }
            }
        }
        } // compute warps
#if CF_PRODUCER
        __syncthreads(); // the next tile's rows have landed; this tile's buffer is free
#endif
    }
    cf_cp_wait0();
}

extern "C" __global__ void __launch_bounds__(CF_THREADS, 1)
conv3x3_bias_prelu_f16(const u16* __restrict__ x, const u16* __restrict__ wt, const float* __restrict__ bias,
                       const float* __restrict__ slope, int nslope, u16* __restrict__ y,
                       int n, int h, int w, int c, int k) {
    extern __shared__ __attribute__((aligned(128))) unsigned char cf_smem[];
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < (u32)CF_SMEM || c <= 0 || c > 64 || (c & 15) || k <= 0 || k > 64 || (k & 7) || blockDim.x != CF_THREADS) return;
    const u32 sm = (cf_smem_addr(cf_smem) + 127u) & ~127u;
    if (c == 64 && k == 64) cf_body<8 / CF_NG, 4>(x, wt, bias, slope, nslope, y, n, h, w, c, k, sm);
    else if (c == 64 && k == 48) cf_body<6 / CF_NG, 4>(x, wt, bias, slope, nslope, y, n, h, w, c, k, sm);
    else cf_body<8 / CF_NG, 0>(x, wt, bias, slope, nslope, y, n, h, w, c, k, sm);
}

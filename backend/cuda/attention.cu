// Attention kernels of the DiT (backend.Transformer's WindowAttention and
// Attention): a FlashAttention-2 style forward pass on tensor cores.
// Header-free like kernels.cu: bf16/fp16 values are unsigned short, the math
// is inline PTX (ldmatrix + mma.sync m16n8k16, fp32 accumulation).
//
//   o[i, h] = sum_j softmax_j(q[i, h] . k[j, h] / sqrt(D)) v[j, h]
//
// q, k, v and o are row-major matrices of ld = heads*D columns; head h is
// columns [h*D, (h+1)*D). Rows are gathered: a "problem" is a set of query
// rows and a set of key/value rows, each a box of frames x rows x columns of
// a token grid (token (f, y, x) is row (f*gh + y)*gw + x):
//
//   queries: F x ny x nx at (y0, x0) of the F x H x W grid of q and o,
//   keys:    F x kh x kw at (ky0, kx0) of the F x KH x KW grid of k and v.
//
// Problem p = (wy, wx) takes ny, y0, ky0 from entry wy of the table's y axis
// and nx, x0, kx0 from entry wx of its x axis (windows are the product of a
// y and an x partition). Attention over all keys is one problem of a 1 x 1 x
// Lq query grid and a 1 x 1 x Lk key grid.
//
// Launch: grid (ceil(max queries of a problem / AT_BQ), problems, heads),
// block AT_THREADS, dynamic shared memory (AT_BQ + 4*AT_BK) * D * 2 +
// 8*AT_BK bytes (96.5 KiB for D = 128: cuFuncSetAttribute first). Blocks
// past their problem's queries return at once.
//
// A block takes AT_BQ = 16*AT_WARPS queries; warp w owns query rows
// 16w..16w+15. It walks the keys in tiles of AT_BK = 64, double-buffered
// with cp.async (tile t+1 loads while tile t is computed): S = Q K^T (Q
// fragments by ldmatrix from the Q tile, the K tile as the col-major B
// operand by plain ldmatrix), an online softmax in fp32 on log2-scaled
// scores (exp2), P rounded to the storage type as the A operand of
// O += P V (V by ldmatrix.trans). Keys past the end are zero-filled and
// masked to -inf; queries past the end are computed on zeros and not
// stored. The output is staged through the warp's rows of the Q tile for
// 16-byte stores.
//
// Shared memory rows are D*2 bytes (D/8 16-byte chunks); chunk c of row r
// lives at chunk c ^ (r & 7), so ldmatrix and the cp.async writes are free
// of bank conflicts. Loads: D/8 consecutive threads copy one row (256 bytes
// for D = 128), rows gathered by index; the row numbers of key tiles are
// computed once per tile, a tile ahead, into shared memory.
//
// Build variants (NVRTC -D options; BenchmarkWindowAttention times some):
// AT_WARPS (8), AT_QREG = 1 to keep the Q fragments in registers instead
// of reloading them every tile, AT_MINB = blocks per multiprocessor for
// __launch_bounds__. The defaults, 8 warps, Q reloaded, 2 blocks per
// multiprocessor (128 registers, 24 bytes spilled by NVRTC 13), were the
// fastest measured (docs/BENCHMARKS.md, "Notes moved from code comments").

typedef unsigned short u16;
typedef unsigned int u32;

#ifndef AT_WARPS
#define AT_WARPS 8
#endif
#ifndef AT_QREG
#define AT_QREG 0 // 1: Q fragments in registers (0: ldmatrix them every tile)
#endif
#ifndef AT_MINB
#define AT_MINB 2 // __launch_bounds__ blocks per multiprocessor
#endif
#define AT_THREADS (32 * AT_WARPS)
#define AT_BQ (16 * AT_WARPS) // queries per block
#define AT_BK 64              // keys per tile
#define AT_MAXWIN 64          // table entries per axis
#define AT_NEG_INF (__int_as_float(0xff800000))

// at_table is the problem table, passed by value (__grid_constant__: read
// in place, not copied per thread): entry i of an axis is a query range
// [q0, q0+nq) and a key range [k0, k0+kh or kw) along it.
struct at_table {
    int yq0[AT_MAXWIN], ynq[AT_MAXWIN], yk0[AT_MAXWIN];
    int xq0[AT_MAXWIN], xnq[AT_MAXWIN], xk0[AT_MAXWIN];
};

// at_box maps index j of an F x ny x nx box at (y0, x0) of a gh x gw grid
// (frames outermost) to its row.
struct at_box {
    int ny, nx, y0, x0, gh, gw;
};

__device__ __forceinline__ long long at_row(const at_box& b, int j) {
    const int xx = j % b.nx, r = j / b.nx;
    const int yy = r % b.ny, f = r / b.ny;
    return (long long)(f * b.gh + b.y0 + yy) * b.gw + b.x0 + xx;
}

__device__ __forceinline__ u32 at_smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
// at_cp16 copies 16 bytes global -> shared; n = 0 writes 16 zero bytes.
__device__ __forceinline__ void at_cp16(u32 dst, const void* src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void at_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void at_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void at_ldsm(u32 a, u32* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void at_ldsm_t(u32 a, u32* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// at_mma: c += a b for a 16x16 A fragment and a 16x8 B fragment (b0, b1).
template <bool BF>
__device__ __forceinline__ void at_mma(float* c, const u32* a, u32 b0, u32 b1) {
    if (BF)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// at_pack rounds two floats to the storage type, lo in the low half (the
// lower address, the lower column).
template <bool BF>
__device__ __forceinline__ u32 at_pack(float lo, float hi) {
    u32 r;
    if (BF) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float at_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float at_shfl_xor(float v, int m) {
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(m));
    return r;
}

// at_load_q queues the cp.async copies of query rows [q0, q0+AT_BQ) (D
// columns from q) into the tile at shared address s; rows >= nq are
// zero-filled.
template <int D>
__device__ __forceinline__ void at_load_q(u32 s, const u16* __restrict__ q, int ld, const at_box& b, int q0, int nq,
                                          int tid) {
    constexpr int CH = D / 8, RPP = AT_THREADS / CH;
    const int c = tid % CH;
#pragma unroll
    for (int p = 0; p < AT_BQ / RPP; p++) {
        const int r = tid / CH + p * RPP, j = q0 + r;
        const bool ok = j < nq;
        at_cp16(s + r * (D * 2) + ((c ^ (r & 7)) << 4), ok ? q + at_row(b, j) * ld + c * 8 : q, ok ? 16 : 0);
    }
}

// at_load_kv queues the copies of a key tile into the K and V tiles at sk
// and sv: tile row r is row idx[r] of k and v, zeros where idx[r] < 0.
template <int D>
__device__ __forceinline__ void at_load_kv(u32 sk, u32 sv, const u16* __restrict__ k, const u16* __restrict__ v,
                                           int ld, const int* idx, int tid) {
    constexpr int CH = D / 8, RPP = AT_THREADS / CH;
    const int c = tid % CH;
#pragma unroll
    for (int p = 0; p < AT_BK / RPP; p++) {
        const int r = tid / CH + p * RPP, row = idx[r];
        const long long off = (long long)(row < 0 ? 0 : row) * ld + c * 8;
        const u32 so = r * (D * 2) + ((c ^ (r & 7)) << 4);
        at_cp16(sk + so, k + off, row >= 0 ? 16 : 0);
        at_cp16(sv + so, v + off, row >= 0 ? 16 : 0);
    }
}

template <int D, bool BF>
__device__ __forceinline__ void at_body(const u16* __restrict__ q, const u16* __restrict__ k,
                                        const u16* __restrict__ v, u16* __restrict__ o, int ld, int F, int H,
                                        int W, int KH, int KW, int kh, int kw, int nwx, float sl,
                                        const at_table& tab, unsigned char* smp) {
    constexpr int RB = D * 2, CH = D / 8, KS = D / 16; // row bytes, chunks, k-steps of S
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wy = blockIdx.y / nwx, wx = blockIdx.y - wy * nwx;
    const at_box qb = {tab.ynq[wy], tab.xnq[wx], tab.yq0[wy], tab.xq0[wx], H, W};
    const int nq = F * qb.ny * qb.nx, q0 = blockIdx.x * AT_BQ;
    if (q0 >= nq) return;
    const at_box kb = {kh, kw, tab.yk0[wy], tab.xk0[wx], KH, KW};
    const int nk = F * kh * kw, ntiles = (nk + AT_BK - 1) / AT_BK;
    const int col = blockIdx.z * D;
    q += col;
    k += col;
    v += col;
    o += col;

    // Shared memory: Q tile, K tiles (2 stages), V tiles (2 stages), and
    // the rows of the key tiles (idx[u & 1] = tile u's, -1 past the end),
    // computed a tile ahead by the first AT_BK threads.
    const u32 sQ = at_smem_addr(smp), sK = sQ + AT_BQ * RB, sV = sK + 2 * AT_BK * RB; // stage s at + s*AT_BK*RB
    int* idx = (int*)(smp + (AT_BQ + 4 * AT_BK) * RB);
    if (tid < AT_BK) {
        idx[tid] = tid < nk ? (int)at_row(kb, tid) : -1;
        idx[AT_BK + tid] = AT_BK + tid < nk ? (int)at_row(kb, AT_BK + tid) : -1;
    }
    at_load_q<D>(sQ, q, ld, qb, q0, nq, tid);
    __syncthreads();
    at_load_kv<D>(sK, sV, k, v, ld, idx, tid);
    at_commit();

    // ldmatrix lane roles. A (Q, 16x16) and B of V (.trans): lane l gives
    // row (l & 7) + 8*((l >> 3) & 1), chunk +(l >> 4); B of K: key
    // (l & 7) + 8*(l >> 4), chunk +((l >> 3) & 1). Every row is = l (mod 8).
    const int sw = lane & 7;
    const int arow = sw + ((lane >> 3) & 1) * 8, ach = lane >> 4;
    const int krow = sw + (lane >> 4) * 8, kch = (lane >> 3) & 1;
    const int g = lane >> 2, tq = lane & 3; // accumulator row g (and g+8), columns 2tq, 2tq+1

    u32 qf[AT_QREG ? KS : 1][4];
    float acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    float m0 = AT_NEG_INF, m1 = AT_NEG_INF, l0 = 0.0f, l1 = 0.0f; // rows g, g+8: max (raw), sum

    for (int t = 0; t < ntiles; t++) {
        at_wait0();
        __syncthreads(); // tile t landed; every warp is done with tile t-1's stage
        if (AT_QREG && t == 0) {
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                at_ldsm(sQ + (warp * 16 + arow) * RB + (((2 * kk + ach) ^ sw) << 4), qf[kk]);
        }
        if (t + 1 < ntiles) {
            const u32 off = ((t + 1) & 1) * AT_BK * RB;
            at_load_kv<D>(sK + off, sV + off, k, v, ld, idx + ((t + 1) & 1) * AT_BK, tid);
        }
        at_commit();
        if (t + 2 < ntiles && tid < AT_BK) { // tile t's rows are used: replace them by tile t+2's
            const int j = (t + 2) * AT_BK + tid;
            idx[(t & 1) * AT_BK + tid] = j < nk ? (int)at_row(kb, j) : -1;
        }
        const u32 sk = sK + (t & 1) * AT_BK * RB, sv = sV + (t & 1) * AT_BK * RB;

        // S = Q K^T: s[n] is keys 8n..8n+7 of the tile.
        float s[AT_BK / 8][4];
#pragma unroll
        for (int n = 0; n < AT_BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            u32 qa[4];
            if (!AT_QREG) at_ldsm(sQ + (warp * 16 + arow) * RB + (((2 * kk + ach) ^ sw) << 4), qa);
            const u32* a = AT_QREG ? qf[kk] : qa;
#pragma unroll
            for (int p = 0; p < AT_BK / 16; p++) {
                u32 b[4];
                at_ldsm(sk + (p * 16 + krow) * RB + (((2 * kk + kch) ^ sw) << 4), b);
                at_mma<BF>(s[2 * p], a, b[0], b[1]);
                at_mma<BF>(s[2 * p + 1], a, b[2], b[3]);
            }
        }
        if ((t + 1) * AT_BK > nk) { // the last tile: mask keys past the end
            const int lim = nk - t * AT_BK;
#pragma unroll
            for (int n = 0; n < AT_BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (n * 8 + 2 * tq + e >= lim) s[n][e] = s[n][2 + e] = AT_NEG_INF;
        }

        // Online softmax: rescale by exp2((m_old - m_new) * sl).
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int n = 0; n < AT_BK / 8; n++) {
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, at_shfl_xor(mx0, 1));
        mx0 = fmaxf(mx0, at_shfl_xor(mx0, 2));
        mx1 = fmaxf(mx1, at_shfl_xor(mx1, 1));
        mx1 = fmaxf(mx1, at_shfl_xor(mx1, 2));
        const float al0 = at_exp2((m0 - mx0) * sl), al1 = at_exp2((m1 - mx1) * sl);
        m0 = mx0;
        m1 = mx1;
        const float mb0 = mx0 * sl, mb1 = mx1 * sl;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int n = 0; n < AT_BK / 8; n++) {
            s[n][0] = at_exp2(fmaf(s[n][0], sl, -mb0));
            s[n][1] = at_exp2(fmaf(s[n][1], sl, -mb0));
            s[n][2] = at_exp2(fmaf(s[n][2], sl, -mb1));
            s[n][3] = at_exp2(fmaf(s[n][3], sl, -mb1));
            rs0 += s[n][0] + s[n][1];
            rs1 += s[n][2] + s[n][3];
        }
        l0 = l0 * al0 + rs0;
        l1 = l1 * al1 + rs1;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            acc[i][0] *= al0;
            acc[i][1] *= al0;
            acc[i][2] *= al1;
            acc[i][3] *= al1;
        }

        // O += P V: the S accumulators of keys 16kk..16kk+15 are the A
        // fragment of k-step kk.
#pragma unroll
        for (int kk = 0; kk < AT_BK / 16; kk++) {
            const u32 pa[4] = {at_pack<BF>(s[2 * kk][0], s[2 * kk][1]), at_pack<BF>(s[2 * kk][2], s[2 * kk][3]),
                               at_pack<BF>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               at_pack<BF>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int c = 0; c < D / 16; c++) {
                u32 b[4];
                at_ldsm_t(sv + (kk * 16 + arow) * RB + (((2 * c + ach) ^ sw) << 4), b);
                at_mma<BF>(acc[2 * c], pa, b[0], b[1]);
                at_mma<BF>(acc[2 * c + 1], pa, b[2], b[3]);
            }
        }
    }
    at_wait0();

    // Normalise, stage the warp's 16 rows in its rows of the Q tile (only
    // this warp read them), then store them 16 bytes per lane.
    l0 += at_shfl_xor(l0, 1);
    l0 += at_shfl_xor(l0, 2);
    l1 += at_shfl_xor(l1, 1);
    l1 += at_shfl_xor(l1, 2);
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
    const int r0 = warp * 16 + g; // r0 & 7 == r0 + 8 & 7 == g
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        const u32 a = sQ + r0 * RB + ((i ^ g) << 4) + tq * 4;
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(at_pack<BF>(acc[i][0] * i0, acc[i][1] * i0)) : "memory");
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(a + 8 * RB), "r"(at_pack<BF>(acc[i][2] * i1, acc[i][3] * i1)) : "memory");
    }
    __syncwarp();
#pragma unroll
    for (int idx = lane; idx < 16 * CH; idx += 32) {
        const int r = warp * 16 + idx / CH, c = idx % CH, i = q0 + r;
        u32 x0, x1, x2, x3;
        asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                     : "r"(sQ + r * RB + ((c ^ (r & 7)) << 4)) : "memory");
        if (i < nq) {
            u16* dst = o + at_row(qb, i) * ld + c * 8;
            asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(dst), "r"(x0), "r"(x1), "r"(x2), "r"(x3) : "memory");
        }
    }
}

// attention_d{D}_{bf16,f16}(q, k, v, o, ld, F, H, W, KH, KW, kh, kw, nwx,
// sl, table): the problems are (blockIdx.y / nwx, blockIdx.y % nwx), sl is
// log2(e) / sqrt(D). See the top of the file.
#define AT_KERNEL(D, T, BF)                                                                                        \
    extern "C" __global__ void __launch_bounds__(AT_THREADS, AT_MINB) attention_d##D##_##T(                                \
        const u16* __restrict__ q, const u16* __restrict__ k, const u16* __restrict__ v, u16* __restrict__ o,     \
        int ld, int F, int H, int W, int KH, int KW, int kh, int kw, int nwx, float sl,                          \
        const __grid_constant__ at_table tab) {                                                                   \
        extern __shared__ __attribute__((aligned(128))) unsigned char at_smem[];                                  \
        at_body<D, BF>(q, k, v, o, ld, F, H, W, KH, KW, kh, kw, nwx, sl, tab, at_smem);                       \
    }

AT_KERNEL(128, bf16, true)
AT_KERNEL(128, f16, false)
AT_KERNEL(64, bf16, true)
AT_KERNEL(64, f16, false)

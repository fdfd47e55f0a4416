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
// fastest on the H200: 291 TFLOP/s on the DiT's shifted windows (6 x 45 x
// 80 tokens, 24 heads of 128, bf16; 1536 keys a window) and 256 TFLOP/s
// on its cross-attention (21600 x 512), counting 4*Lq*Lk*D*heads. 4 warps
// with Q in registers (1 to 2 blocks per multiprocessor): 264 and 225;
// 8 warps with Q in registers (213 registers, 1 block): 281 and 229.

typedef unsigned short u16;
typedef unsigned int u32;

#ifndef AT_WARPS
#define AT_WARPS 8
#endif
#ifndef AT_QREG
#define AT_QREG 0 // 1: Q fragments in registers (0: ldmatrix them every tile)
#endif
#ifndef AT_FP8
#define AT_FP8 0 // 1: the e4m3 kernels too (compute capability 8.9 and newer)
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

// at_mma8: c += a b for a 16x32 A and a 32x8 B fragment of e4m3 values
// (fragments laid out as the 16-bit ones with two values per half).
__device__ __forceinline__ void at_mma8(float* c, const u32* a, u32 b0, u32 b1) {
#if AT_FP8
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
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

// at_load_q queues the cp.async copies of query rows [q0, q0+AT_BQ) (RB
// bytes each from q, rows ld bytes apart) into the tile at shared address
// s; rows >= nq are zero-filled.
template <int RB>
__device__ __forceinline__ void at_load_q(u32 s, const unsigned char* __restrict__ q, int ld, const at_box& b, int q0,
                                          int nq, int tid) {
    constexpr int CH = RB / 16, RPP = AT_THREADS / CH;
    const int c = tid % CH;
#pragma unroll
    for (int p = 0; p < AT_BQ / RPP; p++) {
        const int r = tid / CH + p * RPP, j = q0 + r;
        const bool ok = j < nq;
        at_cp16(s + r * RB + ((c ^ (r & 7)) << 4), ok ? q + at_row(b, j) * ld + c * 16 : q, ok ? 16 : 0);
    }
}

// at_load_rows queues the copies of a key tile's rows of x (RB bytes each,
// rows ld bytes apart) into the tile at s: tile row r is row idx[r] of x,
// zeros where idx[r] < 0.
template <int RB>
__device__ __forceinline__ void at_load_rows(u32 s, const unsigned char* __restrict__ x, int ld, const int* idx, int tid) {
    constexpr int CH = RB / 16, RPP = AT_THREADS / CH;
    const int c = tid % CH;
#pragma unroll
    for (int p = 0; p < AT_BK / RPP; p++) {
        const int r = tid / CH + p * RPP, row = idx[r];
        at_cp16(s + r * RB + ((c ^ (r & 7)) << 4), x + (long long)(row < 0 ? 0 : row) * ld + c * 16, row >= 0 ? 16 : 0);
    }
}

// at_load_scales queues the copies of a key tile's scales (fp8 keys): entry
// r is ks[idx[r] * heads], zero where idx[r] < 0.
__device__ __forceinline__ void at_load_scales(u32 s, const float* __restrict__ ks, int heads, const int* idx, int tid) {
    if (tid < AT_BK) {
        const int row = idx[tid];
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s + tid * 4),
                     "l"(ks + (long long)(row < 0 ? 0 : row) * heads), "r"(row >= 0 ? 4 : 0) : "memory");
    }
}

// at_body is the kernel for one block. Q8: q and k are e4m3 (one byte a
// value, rows ld bytes apart) with float32 scales qs and ks per row and
// head (row r, head h at r * heads + h), and S = Q K^T runs on e4m3
// tensor cores (mma m16n8k32) before the scales are applied; otherwise q
// and k are in the storage type like v, and qs, ks are unused.
template <int D, bool BF, bool Q8>
__device__ __forceinline__ void at_body(const void* __restrict__ qp, const void* __restrict__ kp,
                                        const u16* __restrict__ v, u16* __restrict__ o, int ld, int F, int H,
                                        int W, int KH, int KW, int kh, int kw, int nwx, float sl,
                                        const at_table& tab, const float* __restrict__ qs,
                                        const float* __restrict__ ks, unsigned char* smp) {
    constexpr int RB = D * 2, CH = D / 8;                       // storage-type rows: bytes, 16-byte chunks
    constexpr int QB = Q8 ? D : RB, KS = Q8 ? D / 32 : D / 16; // Q and K rows: bytes; k-steps of S
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wy = blockIdx.y / nwx, wx = blockIdx.y - wy * nwx;
    const at_box qb = {tab.ynq[wy], tab.xnq[wx], tab.yq0[wy], tab.xq0[wx], H, W};
    const int nq = F * qb.ny * qb.nx, q0 = blockIdx.x * AT_BQ;
    if (q0 >= nq) return;
    const at_box kb = {kh, kw, tab.yk0[wy], tab.xk0[wx], KH, KW};
    const int nk = F * kh * kw, ntiles = (nk + AT_BK - 1) / AT_BK;
    const int head = blockIdx.z, heads = gridDim.z, col = head * D;
    const int qld = Q8 ? ld : ld * 2; // bytes between rows of q and k
    const unsigned char* q = (const unsigned char*)qp + col * (QB / D);
    const unsigned char* k = (const unsigned char*)kp + col * (QB / D);
    v += col;
    o += col;

    // Shared memory: Q tile, K tiles (2 stages), V tiles (2 stages), the
    // rows of the key tiles (idx[u & 1] = tile u's, -1 past the end),
    // computed a tile ahead by the first AT_BK threads, and for Q8 the key
    // tiles' scales (2 stages).
    const u32 sQ = at_smem_addr(smp), sK = sQ + AT_BQ * QB, sV = sK + 2 * AT_BK * QB; // stage s at + s*AT_BK*row bytes
    int* idx = (int*)(smp + AT_BQ * QB + 2 * AT_BK * QB + 2 * AT_BK * RB);
    const u32 sS = at_smem_addr(idx + 2 * AT_BK);
    const float* kscale = (const float*)(idx + 2 * AT_BK);
    if (tid < AT_BK) {
        idx[tid] = tid < nk ? (int)at_row(kb, tid) : -1;
        idx[AT_BK + tid] = AT_BK + tid < nk ? (int)at_row(kb, AT_BK + tid) : -1;
    }
    at_load_q<QB>(sQ, q, qld, qb, q0, nq, tid);
    __syncthreads();
    at_load_rows<QB>(sK, k, qld, idx, tid);
    at_load_rows<RB>(sV, (const unsigned char*)v, ld * 2, idx, tid);
    if (Q8) at_load_scales(sS, ks + head, heads, idx, tid);
    at_commit();

    // ldmatrix lane roles. A (Q, 16x16) and B of V (.trans): lane l gives
    // row (l & 7) + 8*((l >> 3) & 1), chunk +(l >> 4); B of K: key
    // (l & 7) + 8*(l >> 4), chunk +((l >> 3) & 1). Every row is = l (mod 8).
    // The e4m3 fragments are the 16-bit ones with two values a half.
    const int sw = lane & 7;
    const int arow = sw + ((lane >> 3) & 1) * 8, ach = lane >> 4;
    const int krow = sw + (lane >> 4) * 8, kch = (lane >> 3) & 1;
    const int g = lane >> 2, tq = lane & 3; // accumulator row g (and g+8), columns 2tq, 2tq+1

    // The scales of the warp's query rows g and g+8 (Q8).
    float sq0 = 0.0f, sq1 = 0.0f;
    if (Q8) {
        const int j0 = q0 + warp * 16 + g, j1 = j0 + 8;
        if (j0 < nq) sq0 = qs[at_row(qb, j0) * heads + head];
        if (j1 < nq) sq1 = qs[at_row(qb, j1) * heads + head];
    }

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
                at_ldsm(sQ + (warp * 16 + arow) * QB + (((2 * kk + ach) ^ sw) << 4), qf[kk]);
        }
        if (t + 1 < ntiles) {
            const int st = (t + 1) & 1;
            const int* ti = idx + st * AT_BK;
            at_load_rows<QB>(sK + st * AT_BK * QB, k, qld, ti, tid);
            at_load_rows<RB>(sV + st * AT_BK * RB, (const unsigned char*)v, ld * 2, ti, tid);
            if (Q8) at_load_scales(sS + st * AT_BK * 4, ks + head, heads, ti, tid);
        }
        at_commit();
        if (t + 2 < ntiles && tid < AT_BK) { // tile t's rows are used: replace them by tile t+2's
            const int j = (t + 2) * AT_BK + tid;
            idx[(t & 1) * AT_BK + tid] = j < nk ? (int)at_row(kb, j) : -1;
        }
        const u32 sk = sK + (t & 1) * AT_BK * QB, sv = sV + (t & 1) * AT_BK * RB;

        // S = Q K^T: s[n] is keys 8n..8n+7 of the tile.
        float s[AT_BK / 8][4];
#pragma unroll
        for (int n = 0; n < AT_BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            u32 qa[4];
            if (!AT_QREG) at_ldsm(sQ + (warp * 16 + arow) * QB + (((2 * kk + ach) ^ sw) << 4), qa);
            const u32* a = AT_QREG ? qf[kk] : qa;
#pragma unroll
            for (int p = 0; p < AT_BK / 16; p++) {
                u32 b[4];
                at_ldsm(sk + (p * 16 + krow) * QB + (((2 * kk + kch) ^ sw) << 4), b);
                if (Q8) {
                    at_mma8(s[2 * p], a, b[0], b[1]);
                    at_mma8(s[2 * p + 1], a, b[2], b[3]);
                } else {
                    at_mma<BF>(s[2 * p], a, b[0], b[1]);
                    at_mma<BF>(s[2 * p + 1], a, b[2], b[3]);
                }
            }
        }
        if (Q8) { // scale: row i by its query's scale, column j by its key's
            const float* kst = kscale + (t & 1) * AT_BK;
#pragma unroll
            for (int n = 0; n < AT_BK / 8; n++) {
                const float k0 = kst[n * 8 + 2 * tq], k1 = kst[n * 8 + 2 * tq + 1];
                s[n][0] *= sq0 * k0;
                s[n][1] *= sq0 * k1;
                s[n][2] *= sq1 * k0;
                s[n][3] *= sq1 * k1;
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
    if (Q8) __syncthreads(); // the output rows reach into the K tiles, which other warps may still read
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
        at_body<D, BF, false>(q, k, v, o, ld, F, H, W, KH, KW, kh, kw, nwx, sl, tab, 0, 0, at_smem);             \
    }

AT_KERNEL(128, bf16, true)
AT_KERNEL(128, f16, false)
AT_KERNEL(64, bf16, true)
AT_KERNEL(64, f16, false)

#if AT_FP8
// attention_q8_d128_bf16(q, qs, k, ks, v, o, ...): q and k in e4m3 with
// their scales (see at_body), v and o bf16. Compiled with -DAT_FP8=1 for
// GPUs of compute capability 8.9 and newer (attention.go's fp8 source).
extern "C" __global__ void __launch_bounds__(AT_THREADS, AT_MINB) attention_q8_d128_bf16(
    const unsigned char* __restrict__ q, const float* __restrict__ qs, const unsigned char* __restrict__ k,
    const float* __restrict__ ks, const u16* __restrict__ v, u16* __restrict__ o, int ld, int F, int H, int W, int KH,
    int KW, int kh, int kw, int nwx, float sl, const __grid_constant__ at_table tab) {
    extern __shared__ __attribute__((aligned(128))) unsigned char at_smem[];
    at_body<128, true, true>(q, k, v, o, ld, F, H, W, KH, KW, kh, kw, nwx, sl, tab, qs, ks, at_smem);
}

// quant_heads: x (rows x heads*D bf16, D = 128) to e4m3 per row and head,
// q = x * 448 / amax, scale = amax / 448 (1 for an all-zero vector), at
// q[r * heads*D + h*D ...] and scale[r * heads + h]. One warp per (row,
// head), 4 values a lane: blocks of 256 threads, rows*heads/8 of them
// rounded up.
extern "C" __global__ void quant_heads(const u16* __restrict__ x, unsigned char* __restrict__ q,
                                       float* __restrict__ scale, long long vecs) {
    const long long w = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (w >= vecs) return;
    const int lane = threadIdx.x & 31;
    const uint2 u = *(const uint2*)(x + w * 128 + lane * 4);
    float f[4] = {__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                  __uint_as_float(u.y & 0xffff0000u)};
    float amax = fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3])));
    for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, at_shfl_xor(amax, m));
    const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
    if (lane == 0) scale[w] = amax > 0.0f ? amax / 448.0f : 1.0f;
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(f[1] * inv), "f"(f[0] * inv));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(f[3] * inv), "f"(f[2] * inv));
    *(u32*)(q + w * 128 + lane * 4) = (u32)lo | ((u32)hi << 16);
}
#endif

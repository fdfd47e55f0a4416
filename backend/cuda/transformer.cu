// Row kernels of the transformer ops (see transformer.go): LayerNorm and
// RMSNorm + RoPE. One block of 256 threads per row; float32 arithmetic on
// fp16/bf16 ("T") storage. Header-free like kernels.cu.

typedef unsigned short u16;

__device__ __forceinline__ float ld_f16(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 st_f16(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float ld_bf16(u16 h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ u16 st_bf16(float f) { u16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }

// block_sum returns the sum of v over the block (256 threads) to every thread.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); // part may still be read by a previous call
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#define ROW_KERNELS(T, LD, ST)                                                                          \
/* layer_norm: out[r] = (x[r] - mean) / sqrt(var + eps), variance about the mean. */                 \
extern "C" __global__ void layer_norm_##T(const u16* __restrict__ x, u16* __restrict__ out, int cols, float eps) { \
    const u16* row = x + (long long)blockIdx.x * cols;                                                \
    u16* o = out + (long long)blockIdx.x * cols;                                                      \
    float s = 0.0f;                                                                                   \
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += LD(row[i]);                            \
    float mean = block_sum(s) / cols;                                                                 \
    float q = 0.0f;                                                                                   \
    for (int i = threadIdx.x; i < cols; i += blockDim.x) { float d = LD(row[i]) - mean; q += d * d; } \
    float inv = rsqrtf(block_sum(q) / cols + eps);                                                    \
    for (int i = threadIdx.x; i < cols; i += blockDim.x) o[i] = ST((LD(row[i]) - mean) * inv);        \
}                                                                                                     \
/* rms_norm_rope: x[r] = x[r] / rms * w, then (rope) each head's pair j rotated by pos * theta_j.   \
   parts: pairs per head for t, h, w; grid h x w tokens per frame; offset: first frame's index. */   \
extern "C" __global__ void rms_norm_rope_##T(u16* __restrict__ x, const u16* __restrict__ w, int cols, float eps, \
                                             int rope, int head_dim, int pt, int ph, int gh, int gw, int offset) { \
    u16* row = x + (long long)blockIdx.x * cols;                                                      \
    float q = 0.0f;                                                                                   \
    for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = LD(row[i]); q += v * v; }        \
    float inv = rsqrtf(block_sum(q) / cols + eps);                                                    \
    int r = blockIdx.x;                                                                               \
    float pos[3] = {(float)(offset + r / (gh * gw)), (float)((r / gw) % gh), (float)(r % gw)};        \
    int half = head_dim / 2;                                                                          \
    for (int p = threadIdx.x; p < cols / 2; p += blockDim.x) {                                        \
        float a = LD(row[2 * p]) * inv * LD(w[2 * p]);                                                \
        float b = LD(row[2 * p + 1]) * inv * LD(w[2 * p + 1]);                                        \
        if (rope) {                                                                                   \
            int j = p % half, ax = 0, n = pt;                                                         \
            if (j >= pt + ph) { ax = 2; j -= pt + ph; n = half - pt - ph; }                           \
            else if (j >= pt) { ax = 1; j -= pt; n = ph; }                                            \
            /* theta = 10000^(-2j / 2n) */                                                            \
            float ang = pos[ax] * exp2f(-13.287712379549449f * (float)j / (float)n);                  \
            float sn, cs;                                                                             \
            sincosf(ang, &sn, &cs);                                                                   \
            float a2 = a * cs - b * sn;                                                               \
            b = a * sn + b * cs;                                                                      \
            a = a2;                                                                                   \
        }                                                                                             \
        row[2 * p] = ST(a);                                                                           \
        row[2 * p + 1] = ST(b);                                                                       \
    }                                                                                                 \
}

ROW_KERNELS(f16, ld_f16, st_f16)
ROW_KERNELS(bf16, ld_bf16, st_bf16)

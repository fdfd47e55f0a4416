// Row kernels of the transformer ops (see transformer.go): LayerNorm,
// RMSNorm + RoPE and the weights of attention to fixed keys, float32
// arithmetic on fp16/bf16 ("T") storage, one block per row. Header-free
// like kernels.cu.
//
// The *_vec kernels (128 threads, rows of at most VEC_COLS columns, a
// multiple of 8, 16-byte aligned) hold the row in registers: one 16-byte
// load and one store per 8 values, so a row crosses memory once each way.
// The scalar kernels (256 threads) take any row.

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

// RoPE tables: the rotary cosine and sine of each token and pair, as (cos, sin) float pairs, made
// once per token grid by rope_table: F x pt entries for the frame axis (angle (offset + f) *
// theta_j), then gh x ph for rows and gw x pw for columns, theta_j = 10000^(-j/n) for the n pairs
// of the axis; head_dim / 2 = pt + ph + pw pairs per head. With offset_at set (a recorded graph),
// the offset is offset + *offset_at.
extern "C" __global__ void rope_table(float* __restrict__ tab, int frames, int gh, int gw, int offset,
                                      const int* __restrict__ offset_at, int pt, int ph, int pw) {
    if (offset_at) offset += *offset_at;
    int nt = frames * pt, nh = gh * ph, total = nt + nh + gw * pw;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int p, j, n;
        if (i < nt) { p = offset + i / pt; j = i % pt; n = pt; }
        else if (i < nt + nh) { p = (i - nt) / ph; j = (i - nt) % ph; n = ph; }
        else { p = (i - nt - nh) / pw; j = (i - nt - nh) % pw; n = pw; }
        float sn, cs;
        sincosf((float)p * exp2f(-13.287712379549449f * (float)j / (float)n), &sn, &cs);
        tab[2 * i] = cs;
        tab[2 * i + 1] = sn;
    }
}

// rope_rotate rotates the pair (a, b) of pair index j in its head by the table's angle for the
// token at frame f, row y, column x.
__device__ __forceinline__ void rope_rotate(const float* __restrict__ tab, int j, int f, int y, int x,
                                            int frames, int gh, int pt, int ph, int pw, float& a, float& b) {
    int k;
    if (j < pt) k = f * pt + j;
    else if (j < pt + ph) k = frames * pt + y * ph + (j - pt);
    else k = frames * pt + gh * ph + x * pw + (j - pt - ph);
    float cs = tab[2 * k], sn = tab[2 * k + 1];
    float a2 = a * cs - b * sn;
    b = a * sn + b * cs;
    a = a2;
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
/* rms_norm_rope: x[r] = x[r] / rms * w, then, when tab is set, each head's pair j rotated by its  \
   angle from tab (see rope_table; the grid: frames x gh x gw tokens, pt + ph + pw pairs a head); \
   row r is token first + r. */                                                                      \
extern "C" __global__ void rms_norm_rope_##T(u16* __restrict__ x, const u16* __restrict__ w, int cols, float eps, \
                                             int head_dim, int frames, int gh, int gw, int pt, int ph, \
                                             const float* __restrict__ tab, int first) {              \
    u16* row = x + (long long)blockIdx.x * cols;                                                      \
    float q = 0.0f;                                                                                   \
    for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = LD(row[i]); q += v * v; }        \
    float inv = rsqrtf(block_sum(q) / cols + eps);                                                    \
    int r = blockIdx.x + first, half = head_dim / 2, pw = half - pt - ph;                             \
    int f = min(r / (gh * gw), frames - 1), y = (r / gw) % gh, xx = r % gw; /* padding: last frame */ \
    for (int p = threadIdx.x; p < cols / 2; p += blockDim.x) {                                        \
        float a = LD(row[2 * p]) * inv * LD(w[2 * p]);                                                \
        float b = LD(row[2 * p + 1]) * inv * LD(w[2 * p + 1]);                                        \
        if (tab) rope_rotate(tab, p % half, f, y, xx, frames, gh, pt, ph, pw, a, b);                  \
        row[2 * p] = ST(a);                                                                           \
        row[2 * p + 1] = ST(b);                                                                       \
    }                                                                                                 \
}                                                                                                     \
/* attention_weights: p[r][h * keys + j] = softmax_j(q_h . k_jh / rms(q_r) + bias[j]) for the  \
   row r of q and every head h; k (keys x cols) and bias are float32. Dynamic shared memory:      \
   the row (cols floats), then the heads x keys scores. */                                          \
extern "C" __global__ void attention_weights_##T(const u16* __restrict__ q, const float* __restrict__ k, \
                                                 const float* __restrict__ bias, u16* __restrict__ p,  \
                                                 int cols, int head_dim, int keys, float eps) {        \
    extern __shared__ float sm[];                                                                     \
    const u16* row = q + (long long)blockIdx.x * cols;                                                \
    float ss = 0.0f;                                                                                  \
    for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = LD(row[i]); sm[i] = v; ss += v * v; } \
    float inv = rsqrtf(block_sum(ss) / cols + eps); /* block_sum also orders the writes to sm */     \
    int heads = cols / head_dim, n = heads * keys, lane = threadIdx.x & 31;                           \
    float* s = sm + cols;                                                                             \
    for (int t = threadIdx.x >> 5; t < n; t += blockDim.x >> 5) { /* a warp per (head, key) */       \
        int h = t / keys, j = t % keys;                                                               \
        const float* qh = sm + h * head_dim;                                                          \
        const float* kh = k + (long long)j * cols + h * head_dim;                                     \
        float d = 0.0f;                                                                               \
        for (int c = lane; c < head_dim; c += 32) d += qh[c] * kh[c];                                 \
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);                     \
        if (lane == 0) s[t] = d * inv + bias[j];                                                      \
    }                                                                                                 \
    __syncthreads();                                                                                  \
    u16* out = p + (long long)blockIdx.x * n;                                                         \
    for (int h = threadIdx.x; h < heads; h += blockDim.x) {                                           \
        const float* sh = s + h * keys;                                                               \
        float mx = -3.0e38f, sum = 0.0f;                                                              \
        for (int j = 0; j < keys; j++) mx = fmaxf(mx, sh[j]);                                         \
        for (int j = 0; j < keys; j++) sum += __expf(sh[j] - mx);                                     \
        float r = 1.0f / sum;                                                                         \
        for (int j = 0; j < keys; j++) out[h * keys + j] = ST(__expf(sh[j] - mx) * r);                \
    }                                                                                                 \
}

ROW_KERNELS(f16, ld_f16, st_f16)
ROW_KERNELS(bf16, ld_bf16, st_bf16)

struct __attribute__((aligned(16))) vec8 { unsigned int x, y, z, w; }; // 8 fp16/bf16 values

#define VEC_THREADS 128
#define VEC_PER 4                                  // 16-byte vectors per thread
#define VEC_COLS (VEC_THREADS * VEC_PER * 8)

#define UNPACK8(LD, u, f) {                                                                             \
    unsigned int w_[4] = {(u).x, (u).y, (u).z, (u).w};                                                  \
    _Pragma("unroll") for (int e_ = 0; e_ < 4; e_++) {                                                  \
        (f)[2 * e_] = LD((u16)(w_[e_] & 0xffffu)); (f)[2 * e_ + 1] = LD((u16)(w_[e_] >> 16)); } }
#define PACK8(ST, f, u) {                                                                               \
    unsigned int w_[4];                                                                                 \
    _Pragma("unroll") for (int e_ = 0; e_ < 4; e_++)                                                    \
        w_[e_] = (unsigned int)ST((f)[2 * e_]) | ((unsigned int)ST((f)[2 * e_ + 1]) << 16);             \
    (u).x = w_[0]; (u).y = w_[1]; (u).z = w_[2]; (u).w = w_[3]; }

#define VEC_KERNELS(T, LD, ST)                                                                          \
extern "C" __global__ void __launch_bounds__(VEC_THREADS) layer_norm_vec_##T(const u16* __restrict__ x, u16* __restrict__ out, int cols, float eps) { \
    const vec8* row = (const vec8*)(x + (long long)blockIdx.x * cols);                              \
    vec8* o = (vec8*)(out + (long long)blockIdx.x * cols);                                          \
    int nv = cols >> 3;                                                                               \
    float v[VEC_PER][8], s = 0.0f;                                                                    \
    _Pragma("unroll") for (int k = 0; k < VEC_PER; k++) {                                             \
        int i = threadIdx.x + k * VEC_THREADS;                                                        \
        if (i < nv) { vec8 u = row[i]; UNPACK8(LD, u, v[k]); }                                       \
        else { _Pragma("unroll") for (int e = 0; e < 8; e++) v[k][e] = 0.0f; }                        \
        _Pragma("unroll") for (int e = 0; e < 8; e++) s += v[k][e];                                   \
    }                                                                                                 \
    float mean = block_sum(s) / cols, q = 0.0f;                                                       \
    _Pragma("unroll") for (int k = 0; k < VEC_PER; k++)                                               \
        if (threadIdx.x + k * VEC_THREADS < nv)                                                       \
            _Pragma("unroll") for (int e = 0; e < 8; e++) { float d = v[k][e] - mean; q += d * d; }   \
    float inv = rsqrtf(block_sum(q) / cols + eps);                                                    \
    _Pragma("unroll") for (int k = 0; k < VEC_PER; k++) {                                             \
        int i = threadIdx.x + k * VEC_THREADS;                                                        \
        if (i < nv) {                                                                                 \
            float f[8];                                                                               \
            _Pragma("unroll") for (int e = 0; e < 8; e++) f[e] = (v[k][e] - mean) * inv;              \
            vec8 u; PACK8(ST, f, u); o[i] = u;                                                       \
        }                                                                                             \
    }                                                                                                 \
}                                                                                                     \
extern "C" __global__ void __launch_bounds__(VEC_THREADS) rms_norm_rope_vec_##T(u16* __restrict__ x, const u16* __restrict__ w, int cols, float eps, \
                                             int head_dim, int frames, int gh, int gw, int pt, int ph, \
                                             const float* __restrict__ tab, int first) {              \
    vec8* row = (vec8*)(x + (long long)blockIdx.x * cols);                                          \
    const vec8* wv = (const vec8*)w;                                                                \
    int nv = cols >> 3;                                                                               \
    float v[VEC_PER][8], q = 0.0f;                                                                    \
    _Pragma("unroll") for (int k = 0; k < VEC_PER; k++) {                                             \
        int i = threadIdx.x + k * VEC_THREADS;                                                        \
        if (i < nv) { vec8 u = row[i]; UNPACK8(LD, u, v[k]); }                                       \
        else { _Pragma("unroll") for (int e = 0; e < 8; e++) v[k][e] = 0.0f; }                        \
        _Pragma("unroll") for (int e = 0; e < 8; e++) q += v[k][e] * v[k][e];                         \
    }                                                                                                 \
    float inv = rsqrtf(block_sum(q) / cols + eps);                                                    \
    int r = blockIdx.x + first, half = head_dim / 2, pw = half - pt - ph;                             \
    int f = min(r / (gh * gw), frames - 1), y = (r / gw) % gh, xx = r % gw; /* padding: last frame */ \
    _Pragma("unroll") for (int k = 0; k < VEC_PER; k++) {                                             \
        int i = threadIdx.x + k * VEC_THREADS;                                                        \
        if (i >= nv) continue;                                                                        \
        float g[8];                                                                                   \
        vec8 wu = wv[i]; UNPACK8(LD, wu, g);                                                         \
        _Pragma("unroll") for (int e = 0; e < 8; e += 2) {                                            \
            float a = v[k][e] * inv * g[e], b = v[k][e + 1] * inv * g[e + 1];                         \
            if (tab) rope_rotate(tab, (i * 4 + e / 2) % half, f, y, xx, frames, gh, pt, ph, pw, a, b); \
            v[k][e] = a; v[k][e + 1] = b;                                                             \
        }                                                                                             \
        vec8 u; PACK8(ST, v[k], u); row[i] = u;                                                      \
    }                                                                                                 \
}                                                                                                     \
/* attention_weights_vec: attention_weights with the row in registers like the kernels above,   \
   for heads of 8 * L columns, L a power of two up to 32 (a head's 16-byte vectors are held by L    \
   neighbouring lanes), and at most AW_MAX_KEYS keys. */                                           \
extern "C" __global__ void __launch_bounds__(VEC_THREADS) attention_weights_vec_##T(const u16* __restrict__ q, \
        const float* __restrict__ k, const float* __restrict__ bias, u16* __restrict__ p,              \
        int cols, int head_dim, int keys, float eps) {                                                \
    const vec8* row = (const vec8*)(q + (long long)blockIdx.x * cols);                              \
    int nv = cols >> 3, L = head_dim >> 3, lane = threadIdx.x & 31;                                   \
    float v[VEC_PER][8], ss = 0.0f;                                                                   \
    _Pragma("unroll") for (int c = 0; c < VEC_PER; c++) {                                             \
        int i = threadIdx.x + c * VEC_THREADS;                                                        \
        if (i < nv) { vec8 u = row[i]; UNPACK8(LD, u, v[c]); }                                       \
        else { _Pragma("unroll") for (int e = 0; e < 8; e++) v[c][e] = 0.0f; }                        \
        _Pragma("unroll") for (int e = 0; e < 8; e++) ss += v[c][e] * v[c][e];                        \
    }                                                                                                 \
    float inv = rsqrtf(block_sum(ss) / cols + eps);                                                   \
    u16* out = p + (long long)blockIdx.x * (cols / head_dim) * keys;                                  \
    _Pragma("unroll") for (int c = 0; c < VEC_PER; c++) {                                             \
        int i = threadIdx.x + c * VEC_THREADS;                                                        \
        float s[AW_MAX_KEYS];                                                                         \
        _Pragma("unroll") for (int j = 0; j < AW_MAX_KEYS; j++) {                                     \
            s[j] = -3.0e38f;                                                                          \
            if (j >= keys) continue; /* uniform: every lane reaches the shuffles */                  \
            float d = 0.0f;                                                                           \
            if (i < nv) {                                                                             \
                const float4* kk = (const float4*)(k + (long long)j * cols + 8 * i);                  \
                float4 a = kk[0], b = kk[1];                                                          \
                d = v[c][0] * a.x + v[c][1] * a.y + v[c][2] * a.z + v[c][3] * a.w                     \
                  + v[c][4] * b.x + v[c][5] * b.y + v[c][6] * b.z + v[c][7] * b.w;                    \
            }                                                                                         \
            for (int o = L >> 1; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);             \
            s[j] = d * inv + bias[j];                                                                 \
        }                                                                                             \
        if (i >= nv || (lane & (L - 1)) != 0) continue;                                               \
        float mx = -3.0e38f, sum = 0.0f;                                                              \
        _Pragma("unroll") for (int j = 0; j < AW_MAX_KEYS; j++) mx = fmaxf(mx, s[j]);                 \
        _Pragma("unroll") for (int j = 0; j < AW_MAX_KEYS; j++) {                                     \
            s[j] = j < keys ? __expf(s[j] - mx) : 0.0f;                                               \
            sum += s[j];                                                                              \
        }                                                                                             \
        float rs = 1.0f / sum;                                                                        \
        u16* o = out + (i / L) * keys;                                                                \
        _Pragma("unroll") for (int j = 0; j < AW_MAX_KEYS; j++) if (j < keys) o[j] = ST(s[j] * rs);   \
    }                                                                                                 \
}

#define AW_MAX_KEYS 8
VEC_KERNELS(f16, ld_f16, st_f16)
VEC_KERNELS(bf16, ld_bf16, st_bf16)

// Row kernels of the fp8 linear layers (see fp8.go): bf16 rows in, e4m3
// rows out with one float32 scale per row, amax / 448 (e4m3's largest
// finite value), so that row r is q[r] * scale[r]. One block of 256
// threads per row; rows of a multiple of 8 columns, 16-byte aligned.
// Compiled only for GPUs of compute capability 8.9 and newer (the e4m3
// conversion instruction); header-free like kernels.cu.

typedef unsigned short u16;
typedef unsigned char u8;

struct __attribute__((aligned(16))) vec8 { unsigned int x, y, z, w; }; // 8 bf16 values

__device__ __forceinline__ float lo_bf16(unsigned v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi_bf16(unsigned v) { return __uint_as_float(v & 0xffff0000u); }

// e4m3x2 converts a and b to e4m3 (round to nearest even, saturating at
// ±448): a in the low byte, b in the high one.
__device__ __forceinline__ unsigned e4m3x2(float a, float b) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
    return r;
}

// unpack8 reads the 8 bf16 values of v into f.
__device__ __forceinline__ void unpack8(vec8 v, float* f) {
    unsigned w[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 4; i++) { f[2 * i] = lo_bf16(w[i]); f[2 * i + 1] = hi_bf16(w[i]); }
}

// store8 writes f * inv as 8 e4m3 bytes to q.
__device__ __forceinline__ void store8(u8* q, const float* f, float inv) {
    uint2 o;
    o.x = e4m3x2(f[0] * inv, f[1] * inv) | (e4m3x2(f[2] * inv, f[3] * inv) << 16);
    o.y = e4m3x2(f[4] * inv, f[5] * inv) | (e4m3x2(f[6] * inv, f[7] * inv) << 16);
    *(uint2*)q = o;
}

// block_reduce returns the sum (max when is_max) of v over the block to every thread.
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    __syncthreads(); // part may still be read by a previous call
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : 0.0f; // sums, and maxima of magnitudes
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    return v;
}

// scale_of writes the row's scale and returns the factor that maps it onto
// e4m3's range (an all-zero row gets scale 1).
__device__ __forceinline__ float scale_of(float amax, float* scale) {
    if (threadIdx.x == 0) scale[blockIdx.x] = amax > 0.0f ? amax / 448.0f : 1.0f;
    return amax > 0.0f ? 448.0f / amax : 1.0f;
}

// quant_rows: q[r] = x[r] * 448 / amax(x[r]), scale[r] = amax / 448.
extern "C" __global__ void quant_rows(const u16* __restrict__ x, u8* __restrict__ q, float* __restrict__ scale, int cols) {
    const vec8* row = (const vec8*)(x + (long long)blockIdx.x * cols);
    u8* out = q + (long long)blockIdx.x * cols;
    int n = cols / 8;
    float amax = 0.0f, f[8];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unpack8(row[i], f);
        for (int j = 0; j < 8; j++) amax = fmaxf(amax, fabsf(f[j]));
    }
    float inv = scale_of(block_reduce(amax, true), scale);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unpack8(row[i], f);
        store8(out + 8 * i, f, inv);
    }
}

// layer_norm_q8: the LayerNorm of each row (zero mean, unit variance, no
// affine; float32 statistics) quantised as quant_rows does, without a
// bf16 copy in between. The normalised row's largest magnitude comes from
// the row's maximum and minimum.
extern "C" __global__ void layer_norm_q8(const u16* __restrict__ x, u8* __restrict__ q, float* __restrict__ scale,
                                         int cols, float eps) {
    const vec8* row = (const vec8*)(x + (long long)blockIdx.x * cols);
    u8* out = q + (long long)blockIdx.x * cols;
    int n = cols / 8;
    float s = 0.0f, hi = -3.0e38f, lo = 3.0e38f, f[8];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unpack8(row[i], f);
        for (int j = 0; j < 8; j++) { s += f[j]; hi = fmaxf(hi, f[j]); lo = fminf(lo, f[j]); }
    }
    float mean = block_reduce(s, false) / cols;
    hi = block_reduce(hi - mean, true);
    lo = block_reduce(mean - lo, true);
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unpack8(row[i], f);
        for (int j = 0; j < 8; j++) { float d = f[j] - mean; v += d * d; }
    }
    float rstd = rsqrtf(block_reduce(v, false) / cols + eps);
    float inv = scale_of(fmaxf(hi, lo) * rstd, scale);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unpack8(row[i], f);
        for (int j = 0; j < 8; j++) f[j] = (f[j] - mean) * rstd;
        store8(out + 8 * i, f, inv);
    }
}

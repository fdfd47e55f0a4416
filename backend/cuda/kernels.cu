// Elementwise and resampling kernels of the CUDA backend. Header-free (no
// cuda_fp16.h), so NVRTC compiles them on hosts that have only the driver
// and NVRTC libraries. Tensors are NHWC; "T" is the storage type: fp16 or
// bf16 bits in an unsigned short, or f32; S is its C type. Arithmetic is float32.
//
// Launch shape, unless a kernel says otherwise: 1-D grid-stride loops,
// 256 threads per block, enough blocks to fill the GPU.

typedef unsigned short u16;
typedef unsigned char u8;

__device__ __forceinline__ float ld_f16(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 st_f16(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float ld_bf16(u16 h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ u16 st_bf16(float f) { u16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float ld_f32(float f) { return f; }
__device__ __forceinline__ float st_f32(float f) { return f; }

// quantize maps [0,1] to a byte: round half up, clamp, NaN -> 0 (as the CPU
// backend's ToRGB8).
__device__ __forceinline__ u8 quantize(float v) {
    v = v * 255.0f + 0.5f;
    if (!(v > 0.0f)) return 0;
    if (v >= 255.0f) return 255;
    return (u8)v;
}

// activate applies activation act to v of channel ch: 0 none, 1 relu, 2 leaky (alpha), 3 prelu
// (slope[ch], or slope[0] when nslope == 1), 4 soft clamp alpha * tanh(v / alpha), 5 silu, 6 sigmoid,
// 7 add alpha, 8 multiply by alpha, 9 mish (backend.ActKind order).
__device__ __forceinline__ float activate(float v, int ch, int act, float alpha, const float* __restrict__ slope, int nslope) {
    if (v < 0.0f) {
        if (act == 1) v = 0.0f;
        else if (act == 2) v *= alpha;
        else if (act == 3) v *= slope[nslope == 1 ? 0 : ch];
    }
    if (act == 4) v = alpha * tanhf(v / alpha);
    else if (act == 5) v = v / (1.0f + expf(-v));
    else if (act == 6) v = 1.0f / (1.0f + expf(-v));
    else if (act == 7) v += alpha;
    else if (act == 8) v *= alpha;
    else if (act == 9) v *= tanhf(v > 20.0f ? v : log1pf(expf(v)));
    return v;
}

#define GRID_STRIDE(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// quantize16 maps [0,1] to 16 bits as quantize does to 8.
__device__ __forceinline__ u16 quantize16(float v) {
    v = v * 65535.0f + 0.5f;
    if (!(v > 0.0f)) return 0;
    if (v >= 65535.0f) return 65535;
    return (u16)v;
}

// Conv is backend.Conversion: a YCbCr value is min(max(off + (k0 r + k1 g + k2 b) / q + 0.5, 0), max),
// truncated, on RGB rounded to q (255 or 65535); rows Y, Cb, Cr. For BT.601 limited range at 8 bits
// it is the arithmetic of ffmpeg's swscale rgb24 -> yuv420p without flags.
struct Conv { float k[9]; float off[3]; float q; float max; };

__device__ __forceinline__ int ycc(const Conv& c, int i, float r, float g, float b) {
    float v = c.off[i] + (c.k[3 * i] * r + c.k[3 * i + 1] * g + c.k[3 * i + 2] * b) / c.q;
    return (int)fminf(fmaxf(v + 0.5f, 0.0f), c.max);
}

// Inv is backend.Inverse: 16-bit YCbCr -> RGB in [0,1], y = (Y - oy) ky, u = (Cb - oc) kc,
// v = (Cr - oc) kc; R = y + rv v, G = y + gu u + gv v, B = y + bu u, clamped.
struct Inv { float ky, oy, kc, oc, rv, gu, gv, bu; };

__device__ __forceinline__ void put_sample(void* out, int wide, long long i, int v) {
    if (wide) ((u16*)out)[i] = (u16)v;
    else ((u8*)out)[i] = (u8)v;
}

// yuv_block writes block i of planar YUV frames of h x w at out (planes Y, Cb, Cr back to back, frames
// back to back; 1-byte samples, or 2 when wide): with sub 2 a 2x2 block whose chroma is the mean of its
// rounded RGB (4:2:0; h and w even), with sub 1 one pixel (4:4:4). px(f, y, x, c) is channel c of
// pixel (y, x) of frame f in [0,1].
template <class P>
__device__ __forceinline__ void yuv_block(P px, void* out, long long i, int h, int w, int sub, int wide, const Conv& c) {
    int cw = w / sub, ch = h / sub;
    int bx = i % cw;
    long long t = i / cw;
    int by = t % ch;
    int f = t / ch;
    long long plane = (long long)w * h, cplane = (long long)cw * ch;
    long long base = f * (plane + 2 * cplane);
    float sr = 0, sg = 0, sb = 0;
    for (int dy = 0; dy < sub; dy++) {
        for (int dx = 0; dx < sub; dx++) {
            int y = sub * by + dy, x = sub * bx + dx;
            float r, g, b;
            if (wide) r = quantize16(px(f, y, x, 0)), g = quantize16(px(f, y, x, 1)), b = quantize16(px(f, y, x, 2));
            else r = quantize(px(f, y, x, 0)), g = quantize(px(f, y, x, 1)), b = quantize(px(f, y, x, 2));
            put_sample(out, wide, base + (long long)y * w + x, ycc(c, 0, r, g, b));
            sr += r; sg += g; sb += b;
        }
    }
    if (sub == 2) { sr *= 0.25f; sg *= 0.25f; sb *= 0.25f; }
    long long ci = base + plane + (long long)by * cw + bx;
    put_sample(out, wide, ci, ycc(c, 1, sr, sg, sb));
    put_sample(out, wide, ci + cplane, ycc(c, 2, sr, sg, sb));
}

#define KERNELS(T, S, LD, ST)                                                                          \
/* channel_mean: out[f][c] = the mean of channel c of frame f over its px pixels, summed in float. \
   Launch: grid (ceil(c/32), n), block (32, 8): threadIdx.x picks the channel (coalesced), threadIdx.y \
   strides over the pixels, then a tree over y. */                                                  \
extern "C" __global__ void channel_mean_##T(const S* __restrict__ x, S* __restrict__ out, long long px, int c) { \
    __shared__ float part[8][32];                                                                   \
    int ch = blockIdx.x * 32 + threadIdx.x, f = blockIdx.y;                                         \
    float s = 0.0f;                                                                                 \
    if (ch < c)                                                                                     \
        for (long long p = threadIdx.y; p < px; p += 8) s += LD(x[((long long)f * px + p) * c + ch]); \
    part[threadIdx.y][threadIdx.x] = s;                                                             \
    __syncthreads();                                                                                \
    for (int h = 4; h > 0; h >>= 1) {                                                               \
        if (threadIdx.y < h) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];  \
        __syncthreads();                                                                            \
    }                                                                                               \
    if (threadIdx.y == 0 && ch < c) out[(long long)f * c + ch] = ST(part[0][threadIdx.x] / (float)px); \
}                                                                                                   \
/* scale_channels: out = x * s[f][c], per frame f and channel c. */                                 \
extern "C" __global__ void scale_channels_##T(const S* __restrict__ x, const S* __restrict__ k, S* __restrict__ out, \
                                              long long px, int c, long long n) {                   \
    GRID_STRIDE(i, n) out[i] = ST(LD(x[i]) * LD(k[i / (px * c) * c + i % c]));                      \
}                                                                                                   \
/* group_stats: stats[f*groups + g] += (sum, sum of squares) in double of group g of frame f, whose \
   cg channels at every one of px pixels are spread over gridDim.x blocks of 256 threads (atomics; \
   stats zeroed first). Launch: grid (chunks, n*groups), block 256. */                             \
extern "C" __global__ void group_stats_##T(const S* __restrict__ x, double* __restrict__ stats, long long px, int c, int cg) { \
    __shared__ double ps[256], pq[256];                                                             \
    int fg = blockIdx.y, groups = c / cg, f = fg / groups, g = fg % groups;                         \
    long long m = px * cg;                                                                          \
    double s = 0.0, q = 0.0;                                                                        \
    for (long long j = blockIdx.x * 256LL + threadIdx.x; j < m; j += (long long)gridDim.x * 256) {  \
        double v = LD(x[((long long)f * px + j / cg) * c + g * cg + j % cg]);                       \
        s += v; q += v * v;                                                                         \
    }                                                                                               \
    ps[threadIdx.x] = s; pq[threadIdx.x] = q;                                                       \
    __syncthreads();                                                                                \
    for (int h = 128; h > 0; h >>= 1) {                                                             \
        if (threadIdx.x < h) { ps[threadIdx.x] += ps[threadIdx.x + h]; pq[threadIdx.x] += pq[threadIdx.x + h]; } \
        __syncthreads();                                                                            \
    }                                                                                               \
    if (threadIdx.x == 0) { atomicAdd(&stats[2 * fg], ps[0]); atomicAdd(&stats[2 * fg + 1], pq[0]); } \
}                                                                                                   \
/* group_norm: out = (x - mean) * rsqrt(var + eps) * scale[c] + shift[c], mean and var of x's group \
   from group_stats. */                                                                            \
extern "C" __global__ void group_norm_##T(const S* __restrict__ x, const double* __restrict__ stats, \
                                          const float* __restrict__ scale, const float* __restrict__ shift, \
                                          S* __restrict__ out, long long px, int c, int cg, float eps, long long n) { \
    GRID_STRIDE(i, n) {                                                                             \
        int ch = i % c; long long f = i / (px * c);                                                 \
        long long fg = f * (c / cg) + ch / cg;                                                      \
        double cnt = (double)px * cg, mean = stats[2 * fg] / cnt;                                   \
        double var = fmax(stats[2 * fg + 1] / cnt - mean * mean, 0.0);                              \
        float r = (float)(1.0 / sqrt(var + (double)eps));                                           \
        out[i] = ST((LD(x[i]) - (float)mean) * r * scale[ch] + shift[ch]);                          \
    }                                                                                               \
}                                                                                                   \
/* channel_norm: each pixel's c channels normalised (two passes in float), times scale plus shift; \
   one thread per pixel. */                                                                        \
extern "C" __global__ void channel_norm_##T(const S* __restrict__ x, const float* __restrict__ scale, \
                                            const float* __restrict__ shift, S* __restrict__ out, int c, float eps, long long px) { \
    GRID_STRIDE(p, px) {                                                                            \
        const S* v = x + p * c; S* o = out + p * c;                                                 \
        float s = 0.0f, q = 0.0f;                                                                   \
        for (int k = 0; k < c; k++) s += LD(v[k]);                                                  \
        float mean = s / c;                                                                         \
        for (int k = 0; k < c; k++) { float d = LD(v[k]) - mean; q += d * d; }                      \
        float r = rsqrtf(q / c + eps);                                                              \
        for (int k = 0; k < c; k++) o[k] = ST((LD(v[k]) - mean) * r * scale[k] + shift[k]);         \
    }                                                                                               \
}                                                                                                   \
/* from_rgb8: bytes -> [0,1] (v / 255). */                                                          \
extern "C" __global__ void from_rgb8_##T(const u8* __restrict__ in, S* __restrict__ out, long long n) { \
    GRID_STRIDE(i, n) out[i] = ST((float)in[i] / 255.0f);                                           \
}                                                                                                   \
/* from_rgb16: 16-bit words -> [0,1] (v / 65535). */                                               \
extern "C" __global__ void from_rgb16_##T(const u16* __restrict__ in, S* __restrict__ out, long long n) { \
    GRID_STRIDE(i, n) out[i] = ST((float)in[i] / 65535.0f);                                         \
}                                                                                                   \
/* to_rgb16: [0,1] -> 16-bit words, rounded and clamped. */                                         \
extern "C" __global__ void to_rgb16_##T(const S* __restrict__ in, u16* __restrict__ out, long long n) { \
    GRID_STRIDE(i, n) out[i] = quantize16(LD(in[i]));                                               \
}                                                                                                   \
/* from_yuv: planar YCbCr frames of 16-bit words (Y of h*w, then Cb and Cr of ch*cw each, ch = ceil(h / sy), \
   cw = ceil(w / sx), frames back to back) -> RGB (n,h,w,3) by c, the chroma interpolated as         \
   backend.Inverse says: pixel (x, y) at chroma coordinates ((x - ox) / sx, (y - oy) / sy), bilinear, \
   indices clamped; one thread per pixel. sx, sy are 1 or 2. */                                       \
extern "C" __global__ void from_yuv_##T(const u16* __restrict__ in, S* __restrict__ out, int n, int h, int w, \
                                        int sx, int sy, float ox, float oy, Inv c) {                    \
    long long plane = (long long)h * w;                                                             \
    int cw = (w + sx - 1) / sx, ch = (h + sy - 1) / sy;                                             \
    long long cplane = (long long)cw * ch;                                                          \
    GRID_STRIDE(i, (long long)n * plane) {                                                          \
        long long f = i / plane, p = i % plane;                                                     \
        int x = p % w, yy = p / w;                                                                  \
        const u16* src = in + f * (plane + 2 * cplane);                                             \
        int i0 = x, i1 = x, j0 = yy, j1 = yy;                                                       \
        float tx = 0.0f, ty = 0.0f;                                                                 \
        if (sx == 2) {                                                                              \
            float fx = ((float)x - ox) * 0.5f, fl = floorf(fx);                                     \
            tx = fx - fl; i0 = (int)fl; i1 = min(max(i0 + 1, 0), cw - 1); i0 = min(max(i0, 0), cw - 1); \
        }                                                                                           \
        if (sy == 2) {                                                                              \
            float fy = ((float)yy - oy) * 0.5f, fl = floorf(fy);                                    \
            ty = fy - fl; j0 = (int)fl; j1 = min(max(j0 + 1, 0), ch - 1); j0 = min(max(j0, 0), ch - 1); \
        }                                                                                           \
        float cc[2];                                                                                \
        for (int k = 0; k < 2; k++) {                                                               \
            const u16* cp = src + plane + k * cplane;                                               \
            float a = (1.0f - tx) * (float)cp[j0 * cw + i0] + tx * (float)cp[j0 * cw + i1];         \
            float b = (1.0f - tx) * (float)cp[j1 * cw + i0] + tx * (float)cp[j1 * cw + i1];         \
            cc[k] = (1.0f - ty) * a + ty * b;                                                       \
        }                                                                                           \
        float y = ((float)src[p] - c.oy) * c.ky;                                                    \
        float u = (cc[0] - c.oc) * c.kc;                                                            \
        float v = (cc[1] - c.oc) * c.kc;                                                            \
        out[i * 3] = ST(fminf(fmaxf(y + c.rv * v, 0.0f), 1.0f));                                    \
        out[i * 3 + 1] = ST(fminf(fmaxf(y + c.gu * u + c.gv * v, 0.0f), 1.0f));                     \
        out[i * 3 + 2] = ST(fminf(fmaxf(y + c.bu * u, 0.0f), 1.0f));                                \
    }                                                                                               \
}                                                                                                   \
/* to_rgb8: [0,1] -> bytes, rounded and clamped. */                                                 \
extern "C" __global__ void to_rgb8_##T(const S* __restrict__ in, u8* __restrict__ out, long long n) { \
    GRID_STRIDE(i, n) out[i] = quantize(LD(in[i]));                                                 \
}                                                                                                   \
/* to_f32 / from_f32: conversions for upload and download. */                                       \
extern "C" __global__ void to_f32_##T(const S* __restrict__ in, float* __restrict__ out, long long n) { \
    GRID_STRIDE(i, n) out[i] = LD(in[i]);                                                           \
}                                                                                                   \
extern "C" __global__ void from_f32_##T(const float* __restrict__ in, S* __restrict__ out, long long n) { \
    GRID_STRIDE(i, n) out[i] = ST(in[i]);                                                           \
}                                                                                                   \
/* bias_act: out = act(in + bias[ch]) over n elements of out, c channels each, read from the first \
   c of each pixel's cs channels of in (cs = c in place, in == out; cs > c strips the padding of a  \
   convolution whose output channels were padded for cuDNN). act as in activate; bias may be 0. */ \
extern "C" __global__ void bias_act_##T(const S* in, S* out, const float* __restrict__ bias, int c, int cs, \
                                        long long n, int act, float alpha, const float* __restrict__ slope, int nslope) { \
    GRID_STRIDE(i, n) {                                                                             \
        int ch = i % c;                                                                             \
        float v = LD(in[i / c * cs + ch]);                                                          \
        if (bias) v += bias[ch];                                                                    \
        out[i] = ST(activate(v, ch, act, alpha, slope, nslope));                                    \
    }                                                                                               \
}                                                                                                   \
/* tap_sum: the second half of a 3x3 convolution (zero padding 1) computed as a GEMM: z holds, per  \
   pixel, each output channel's 9 taps (z[p, o*9 + ky*3 + kx] = the input pixel p times filter tap  \
   (ky, kx) of output o); out[p, o] = act(bias[o] + the sum of the taps of the 9 neighbours).       \
   One thread per output value; k outputs per pixel. */                                            \
extern "C" __global__ void tap_sum_##T(const S* __restrict__ z, S* __restrict__ out, const float* __restrict__ bias, \
                                       int n, int h, int w, int k, int act, float alpha,          \
                                       const float* __restrict__ slope, int nslope) {               \
    GRID_STRIDE(i, (long long)n * h * w * k) {                                                      \
        int o = i % k; long long p = i / k;                                                         \
        int px = p % w, py = (p / w) % h; long long f = p / ((long long)w * h);                     \
        float v = bias ? bias[o] : 0.0f;                                                            \
        for (int ky = 0; ky < 3; ky++) {                                                            \
            int yy = py + ky - 1;                                                                   \
            if (yy < 0 || yy >= h) continue;                                                        \
            for (int kx = 0; kx < 3; kx++) {                                                        \
                int xx = px + kx - 1;                                                               \
                if (xx >= 0 && xx < w) v += LD(z[((f * h + yy) * w + xx) * 9 * k + o * 9 + ky * 3 + kx]); \
            }                                                                                       \
        }                                                                                           \
        out[i] = ST(activate(v, o, act, alpha, slope, nslope));                                     \
    }                                                                                               \
}                                                                                                   \
/* axpby: out = ca * a + cb * b. */                                                                 \
extern "C" __global__ void axpby_##T(const S* a, const S* b, S* out, long long n, float ca, float cb) { \
    GRID_STRIDE(i, n) out[i] = ST(ca * LD(a[i]) + cb * LD(b[i]));                                   \
}                                                                                                   \
/* binary: out = a op b; op 0 add, 1 sub, 2 mul. */                                                \
extern "C" __global__ void binary_##T(const S* a, const S* b, S* out, long long n, int op) { \
    GRID_STRIDE(i, n) {                                                                             \
        float x = LD(a[i]), y = LD(b[i]);                                                           \
        out[i] = ST(op == 0 ? x + y : op == 1 ? x - y : x * y);                                     \
    }                                                                                               \
}                                                                                                   \
/* pixel_shuffle: (n,h,w,oc*r*r) -> (n,h*r,w*r,oc); order 0 = PyTorch (c*r*r+i*r+j), 1 = DCR. */    \
extern "C" __global__ void pixel_shuffle_##T(const S* __restrict__ in, S* __restrict__ out,    \
                                            int n, int h, int w, int oc, int r, int order) {       \
    long long total = (long long)n * h * r * w * r * oc;                                            \
    GRID_STRIDE(i, total) {                                                                         \
        int c = i % oc; long long t = i / oc;                                                       \
        int X = t % (w * r); t /= (w * r);                                                          \
        int Y = t % (h * r); int f = t / (h * r);                                                   \
        int y = Y / r, ii = Y % r, x = X / r, j = X % r;                                            \
        int ic = order == 0 ? c * r * r + ii * r + j : (ii * r + j) * oc + c;                      \
        out[i] = in[(((long long)f * h + y) * w + x) * (oc * r * r) + ic];                          \
    }                                                                                               \
}                                                                                                   \
/* resize: separable taps precomputed on the host (ty/tx: per output row/column, ntap indices and  \
   weights). Same tap order and float arithmetic as the CPU backend. */                            \
extern "C" __global__ void resize_##T(const S* __restrict__ in, S* __restrict__ out,            \
                                     int n, int ih, int iw, int c, int oh, int ow,                  \
                                     const int* __restrict__ iy, const float* __restrict__ wy, int nty, \
                                     const int* __restrict__ ix, const float* __restrict__ wx, int ntx) { \
    long long total = (long long)n * oh * ow * c;                                                   \
    GRID_STRIDE(i, total) {                                                                         \
        int ch = i % c; long long t = i / c;                                                        \
        int x = t % ow; t /= ow;                                                                    \
        int y = t % oh; int f = t / oh;                                                             \
        float acc = 0.0f;                                                                           \
        for (int a = 0; a < nty; a++) {                                                             \
            const S* row = in + (((long long)f * ih + iy[y * nty + a]) * iw) * c;                 \
            float v = 0.0f;                                                                         \
            for (int b = 0; b < ntx; b++) v += LD(row[(long long)ix[x * ntx + b] * c + ch]) * wx[x * ntx + b]; \
            acc += v * wy[y * nty + a];                                                             \
        }                                                                                           \
        out[i] = ST(acc);                                                                           \
    }                                                                                               \
}                                                                                                   \
/* resize_px: resize for c <= 4, one thread per output pixel, its taps loaded once for all        \
   channels; the same arithmetic as resize. */                                                     \
extern "C" __global__ void resize_px_##T(const S* __restrict__ in, S* __restrict__ out,         \
                                        int n, int ih, int iw, int c, int oh, int ow,               \
                                        const int* __restrict__ iy, const float* __restrict__ wy, int nty, \
                                        const int* __restrict__ ix, const float* __restrict__ wx, int ntx) { \
    long long total = (long long)n * oh * ow;                                                       \
    GRID_STRIDE(i, total) {                                                                         \
        int x = i % ow; long long t = i / ow;                                                       \
        int y = t % oh; int f = t / oh;                                                             \
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                    \
        for (int a = 0; a < nty; a++) {                                                             \
            const S* row = in + (((long long)f * ih + iy[y * nty + a]) * iw) * c;                 \
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                  \
            for (int b = 0; b < ntx; b++) {                                                         \
                const S* px = row + (long long)ix[x * ntx + b] * c;                               \
                float wt = wx[x * ntx + b];                                                         \
                _Pragma("unroll") for (int ch = 0; ch < 4; ch++) if (ch < c) v[ch] += LD(px[ch]) * wt; \
            }                                                                                       \
            float wt = wy[y * nty + a];                                                             \
            _Pragma("unroll") for (int ch = 0; ch < 4; ch++) if (ch < c) acc[ch] += v[ch] * wt;     \
        }                                                                                           \
        _Pragma("unroll") for (int ch = 0; ch < 4; ch++) if (ch < c) out[i * c + ch] = ST(acc[ch]); \
    }                                                                                               \
}                                                                                                   \
/* shuffle_add_nearest: the tail of SRVGGNetCompact in one pass:                                \
   out = PixelShuffle(x, r) + NearestUpsample(base, r), with x (n,h,w,3*r*r) and base (n,h,w,3),   \
   each sum rounded to the storage type as the unfused ops would. mode selects the output:         \
   0 = storage type (n,h*r,w*r,3); 1 = RGB24 bytes, clamped and rounded; 3 = RGB48 words (one      \
   thread per pixel); 2 = YUV frames as to_yuv (sub, wide, c; one thread per block; sub 2 needs    \
   even r). */                                                                                     \
__device__ __forceinline__ float sa_##T(const S* x, const S* base, int f, int h, int w, int r, \
                                        int order, int Y, int X, int c) {                          \
    int y = Y / r, ii = Y % r, xx = X / r, j = X % r;                                               \
    long long p = ((long long)f * h + y) * w + xx;                                                  \
    int ic = order == 0 ? c * r * r + ii * r + j : (ii * r + j) * 3 + c;                           \
    return LD(ST(LD(x[p * (3 * r * r) + ic]) + LD(base[p * 3 + c])));                               \
}                                                                                                   \
extern "C" __global__ void shuffle_add_nearest_##T(const S* __restrict__ x, const S* __restrict__ base, \
                                                   void* __restrict__ out, int n, int h, int w, int r, \
                                                   int order, int mode, int sub, int wide, Conv cv) { \
    int H = h * r, W = w * r;                                                                       \
    if (mode == 2) {                                                                                \
        long long blocks = (long long)n * (H / sub) * (W / sub);                                    \
        GRID_STRIDE(i, blocks) yuv_block([&](int f, int Y, int X, int c) {                          \
            return sa_##T(x, base, f, h, w, r, order, Y, X, c); }, out, i, H, W, sub, wide, cv);     \
        return;                                                                                     \
    }                                                                                               \
    long long total = (long long)n * H * W;                                                         \
    GRID_STRIDE(i, total) {                                                                         \
        int X = i % W; long long t = i / W;                                                         \
        int Y = t % H; int f = t / H;                                                               \
        for (int c = 0; c < 3; c++) {                                                               \
            float v = sa_##T(x, base, f, h, w, r, order, Y, X, c);                                  \
            if (mode == 0) ((S*)out)[i * 3 + c] = ST(v);                                            \
            else if (mode == 3) ((u16*)out)[i * 3 + c] = quantize16(v);                             \
            else ((u8*)out)[i * 3 + c] = quantize(v);                                               \
        }                                                                                           \
    }                                                                                               \
}                                                                                                   \
/* to_yuv: storage-type RGB (n,h,w,3) in [0,1] -> planar YUV frames (see yuv_block): sub 2 is     \
   4:2:0, one thread per 2x2 block; sub 1 is 4:4:4, one per pixel; wide writes 16-bit samples. */  \
extern "C" __global__ void to_yuv_##T(const S* __restrict__ in, void* __restrict__ out, int n, int h, int w, \
                                      int sub, int wide, Conv cv) {                                 \
    long long blocks = (long long)n * (h / sub) * (w / sub);                                        \
    GRID_STRIDE(i, blocks) yuv_block([&](int f, int Y, int X, int c) {                              \
        return LD(in[(((long long)f * h + Y) * w + X) * 3 + c]); }, out, i, h, w, sub, wide, cv);   \
}

/* Kernels of the 16-bit storage types only. */
#define HALF_KERNELS(T, LD, ST)                                                                     \
/* bias_act8: bias_act with cs = c a multiple of 8, eight values per thread with 16-byte loads  \
   and stores (the pool's buffers are 512-byte aligned). n8 = n / 8. */                            \
extern "C" __global__ void bias_act8_##T(const uint4* in, uint4* out, const float* __restrict__ bias, int c, long long n8, \
                                         int act, float alpha, const float* __restrict__ slope, int nslope) { \
    GRID_STRIDE(i, n8) {                                                                            \
        uint4 v = in[i];                                                                            \
        unsigned int w[4] = {v.x, v.y, v.z, v.w};                                                   \
        int ch0 = (int)((i * 8) % c);                                                               \
        for (int k = 0; k < 8; k++) {                                                               \
            int ch = ch0 + k;                                                                       \
            u16 h = (u16)(w[k / 2] >> (16 * (k % 2)));                                              \
            float f = LD(h);                                                                        \
            if (bias) f += bias[ch];                                                                \
            f = activate(f, ch, act, alpha, slope, nslope);                                         \
            unsigned int o = ST(f);                                                                 \
            w[k / 2] = (k % 2) ? ((w[k / 2] & 0xffffu) | (o << 16)) : ((w[k / 2] & 0xffff0000u) | o); \
        }                                                                                           \
        v.x = w[0]; v.y = w[1]; v.z = w[2]; v.w = w[3];                                             \
        out[i] = v;                                                                                 \
    }                                                                                               \
}

/* pad_source: the input coordinate output coordinate i of a pad reads along an axis of n pixels, lo
   and hi added before and after (negative: cropped), or -1 for a zero (backend/internal/check.PadSource). */
__device__ __forceinline__ int pad_source(int i, int n, int lo, int hi, int mode) {
    int a = max(-lo, 0), m = n - a - max(-hi, 0), j = i - max(lo, 0);
    if (j < 0 || j >= m) {
        if (mode == 0) return -1;
        j = j < 0 ? -j : 2 * (m - 1) - j;
    }
    return a + j;
}

#define MOVES(W, S)                                                                                 \
/* Data movement between frames and pixels: values are only moved, never converted, so these are    \
   made for each storage width W (w2: f16 and bf16, w4: f32) and named name_wW. */                  \
/* pixel_unshuffle: (n,h,w,c) -> (n,h/r,w/r,c*r*r), out channel c*r*r + i*r + j. */                 \
extern "C" __global__ void pixel_unshuffle_##W(const S* __restrict__ in, S* __restrict__ out, int n, int h, int w, int c, int r) { \
    int oh = h / r, ow = w / r, oc = c * r * r;                                                     \
    long long total = (long long)n * oh * ow * oc;                                                  \
    GRID_STRIDE(i, total) {                                                                         \
        int q = i % oc; long long t = i / oc;                                                       \
        int x = t % ow; t /= ow;                                                                    \
        int y = t % oh; int f = t / oh;                                                             \
        int ch = q / (r * r), ii = (q / r) % r, j = q % r;                                          \
        out[i] = in[(((long long)f * h + y * r + ii) * w + x * r + j) * c + ch];                    \
    }                                                                                               \
}                                                                                                   \
/* crop_pad: top-left oh x ow of (n,ih,iw,c), zeros beyond. */                                      \
extern "C" __global__ void crop_pad_##W(const S* __restrict__ in, S* __restrict__ out, int n, int ih, int iw, int c, int oh, int ow) { \
    long long total = (long long)n * oh * ow * c;                                                   \
    GRID_STRIDE(i, total) {                                                                         \
        int ch = i % c; long long t = i / c;                                                        \
        int x = t % ow; t /= ow;                                                                    \
        int y = t % oh; int f = t / oh;                                                             \
        out[i] = (y < ih && x < iw) ? in[(((long long)f * ih + y) * iw + x) * c + ch] : (S)0;       \
    }                                                                                               \
}                                                                                                   \
/* pad: (n,ih,iw,c) with t/b/l/r pixels added (negative: cropped) per side, zeros (mode 0) or the \
   image mirrored about its edge pixel (mode 1, PyTorch's reflect), as check.PadSource maps them. */ \
extern "C" __global__ void pad_##W(const S* __restrict__ in, S* __restrict__ out, int n, int ih, int iw, int c, \
                                   int t, int b, int l, int r, int mode) {                          \
    int oh = ih + t + b, ow = iw + l + r;                                                           \
    long long total = (long long)n * oh * ow * c;                                                   \
    GRID_STRIDE(i, total) {                                                                         \
        int ch = i % c; long long q = i / c;                                                        \
        int x = q % ow; q /= ow;                                                                    \
        int y = q % oh; int f = q / oh;                                                             \
        int sy = pad_source(y, ih, t, b, mode), sx = pad_source(x, iw, l, r, mode);                 \
        out[i] = (sy < 0 || sx < 0) ? (S)0 : in[(((long long)f * ih + sy) * iw + sx) * c + ch];     \
    }                                                                                               \
}                                                                                                   \
/* concat_prev: out[f] = [x[f], f > 0 ? x[f-1] : (prev ? prev[0] : 0)] along channels. */           \
extern "C" __global__ void concat_prev_##W(const S* __restrict__ x, const S* __restrict__ prev, S* __restrict__ out, int n, int h, int w, int c) { \
    long long px = (long long)h * w;                                                                \
    long long total = (long long)n * px * 2 * c;                                                    \
    GRID_STRIDE(i, total) {                                                                         \
        int q = i % (2 * c); long long t = i / (2 * c);                                             \
        long long p = t % px; int f = t / px;                                                       \
        if (q < c) out[i] = x[((long long)f * px + p) * c + q];                                     \
        else if (f > 0) out[i] = x[((long long)(f - 1) * px + p) * c + q - c];                      \
        else out[i] = prev ? prev[p * c + q - c] : (S)0;                                            \
    }                                                                                               \
}                                                                                                   \
/* fold_frames: (n,h,w,c) -> (n/s,h,w,s*c); unfold_frames: the inverse. */                          \
extern "C" __global__ void fold_frames_##W(const S* __restrict__ in, S* __restrict__ out, int n, int h, int w, int c, int s) { \
    long long px = (long long)h * w;                                                                \
    long long total = (long long)n * px * c;                                                        \
    GRID_STRIDE(i, total) {                                                                         \
        int q = i % (s * c); long long t = i / (s * c);                                             \
        long long p = t % px; int g = t / px;                                                       \
        out[i] = in[(((long long)g * s + q / c) * px + p) * c + q % c];                             \
    }                                                                                               \
}                                                                                                   \
extern "C" __global__ void unfold_frames_##W(const S* __restrict__ in, S* __restrict__ out, int n, int h, int w, int c, int s) { \
    long long px = (long long)h * w;                                                                \
    long long total = (long long)n * s * px * c;                                                    \
    GRID_STRIDE(i, total) {                                                                         \
        int q = i % c; long long t = i / c;                                                         \
        long long p = t % px; int f = t / px;                                                       \
        out[i] = in[((long long)(f / s) * px + p) * (s * c) + (f % s) * c + q];                     \
    }                                                                                               \
}                                                                                                   \
/* pad_channels: (p pixels, c) -> (p, cp), channels [c, cp) zero: the input of a convolution whose  \
   channel count was padded for cuDNN's tensor-core kernels. One thread per output value (one per   \
   pixel, whose accesses are a pixel apart, was slower: docs/BENCHMARKS.md's notes). */            \
extern "C" __global__ void pad_channels_##W(const S* __restrict__ in, S* __restrict__ out, long long p, int c, int cp) { \
    GRID_STRIDE(i, p * cp) {                                                                        \
        int q = i % cp;                                                                             \
        out[i] = q < c ? in[i / cp * c + q] : (S)0;                                                 \
    }                                                                                               \
}                                                                                                   \
/* pixel_unshuffle_px and pixel_shuffle_px: the same moves for few channels, one thread per output  \
   pixel (the scattered single values of the per-value kernels cost more than the data there). */   \
extern "C" __global__ void pixel_unshuffle_px_##W(const S* __restrict__ in, S* __restrict__ out, int n, int h, int w, int c, int r) { \
    int oh = h / r, ow = w / r, oc = c * r * r;                                                     \
    long long total = (long long)n * oh * ow;                                                       \
    GRID_STRIDE(i, total) {                                                                         \
        int x = i % ow; long long t = i / ow;                                                       \
        int y = t % oh; int f = t / oh;                                                             \
        S* o = out + i * oc;                                                                        \
        for (int ii = 0; ii < r; ii++)                                                              \
            for (int j = 0; j < r; j++) {                                                           \
                const S* p = in + (((long long)f * h + y * r + ii) * w + x * r + j) * c;            \
                for (int ch = 0; ch < c; ch++) o[ch * r * r + ii * r + j] = p[ch];                  \
            }                                                                                       \
    }                                                                                               \
}                                                                                                   \
extern "C" __global__ void pixel_shuffle_px_##W(const S* __restrict__ in, S* __restrict__ out, int n, int h, int w, int oc, int r, int order) { \
    long long total = (long long)n * h * r * w * r;                                                 \
    GRID_STRIDE(i, total) {                                                                         \
        int X = i % (w * r); long long t = i / (w * r);                                             \
        int Y = t % (h * r); int f = t / (h * r);                                                   \
        int y = Y / r, ii = Y % r, x = X / r, j = X % r;                                            \
        const S* p = in + (((long long)f * h + y) * w + x) * (oc * r * r);                          \
        for (int c = 0; c < oc; c++) out[i * oc + c] = p[order == 0 ? c * r * r + ii * r + j : (ii * r + j) * oc + c]; \
    }                                                                                               \
}                                                                                                   \
/* copy_block: rows blocks of n values, block r from src + r*ss + so to dst + r*ds + d0: channel   \
   ranges of pixels (CopyChannels, Channels) and row bands of frames (Band, CopyBand). */            \
/* band_rows: rows [y0, y0+rows) of each of n frames of h rows of rw values; rows outside the     \
   frame are zeros. */                                                                              \
extern "C" __global__ void band_rows_##W(const S* __restrict__ src, S* __restrict__ dst, long long n, int h, \
                                         int rows, long long rw, int y0) {                         \
    GRID_STRIDE(i, n * rows * rw) {                                                                 \
        long long f = i / (rows * rw), k = i % rw;                                                  \
        int sy = y0 + (int)(i / rw % rows);                                                         \
        dst[i] = sy >= 0 && sy < h ? src[(f * h + sy) * rw + k] : (S)0;                             \
    }                                                                                               \
}                                                                                                   \
extern "C" __global__ void copy_block_##W(const S* __restrict__ src, S* __restrict__ dst, long long rows, long long n, \
                                         long long ss, long long so, long long ds, long long d0) { \
    GRID_STRIDE(i, rows * n) dst[i / n * ds + d0 + i % n] = src[i / n * ss + so + i % n];           \
}

MOVES(w2, u16)
MOVES(w4, float)

/* The same data movement in 16-byte chunks (8 f16/bf16 or 4 f32 values), for pixels a whole number
   of chunks, 16-byte-aligned tensors and fewer than 2^31 chunks, so index math is 32-bit. Sizes are
   in chunks: c8 = the chunks of a pixel, px = pixels per frame. */
#define GRID_STRIDE32(i, n) for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)(n); i += gridDim.x * blockDim.x)
extern "C" __global__ void concat_prev8(const uint4* __restrict__ x, const uint4* __restrict__ prev, uint4* __restrict__ out, int n, int px, int c8) {
    unsigned total = (unsigned)n * px * 2 * c8;
    GRID_STRIDE32(i, total) {
        unsigned q = i % (2 * c8), t = i / (2 * c8); /* t = frame * px + pixel */
        uint4 v;
        v.x = v.y = v.z = v.w = 0;
        if (q < (unsigned)c8) v = x[t * c8 + q];
        else if (t >= (unsigned)px) v = x[(t - px) * c8 + q - c8];
        else if (prev) v = prev[t * c8 + q - c8];
        out[i] = v;
    }
}
extern "C" __global__ void fold_frames8(const uint4* __restrict__ in, uint4* __restrict__ out, int n, int px, int c8, int s) {
    unsigned sc = s * c8, total = (unsigned)n * px * c8;
    GRID_STRIDE32(i, total) {
        unsigned q = i % sc, t = i / sc; /* t = group * px + pixel */
        unsigned g = t / px, p = t - g * px, j = q / c8;
        out[i] = in[((g * s + j) * px + p) * c8 + q - j * c8];
    }
}
extern "C" __global__ void unfold_frames8(const uint4* __restrict__ in, uint4* __restrict__ out, int n, int px, int c8, int s) {
    unsigned total = (unsigned)n * px * c8;
    GRID_STRIDE32(i, total) {
        unsigned r = i % c8, t = i / c8; /* t = frame * px + pixel */
        unsigned f = t / px, p = t - f * px, g = f / s;
        out[i] = in[(g * px + p) * (s * c8) + (f - g * s) * c8 + r];
    }
}
/* nearest8: nearest-neighbour resize, (n,ih,iw,c) -> (n,oh,ow,c), source row iy[y] and column ix[x]
   (the resize kernel's one-tap tables). */
extern "C" __global__ void nearest8(const uint4* __restrict__ in, uint4* __restrict__ out, int n, int ih, int iw, int c8,
                                    int oh, int ow, const int* __restrict__ iy, const int* __restrict__ ix) {
    unsigned total = (unsigned)n * oh * ow * c8;
    GRID_STRIDE32(i, total) {
        unsigned r = i % c8, t = i / c8;
        unsigned x = t % ow; t /= ow;
        unsigned y = t % oh, f = t / oh;
        out[i] = in[((f * ih + iy[y]) * iw + ix[x]) * c8 + r];
    }
}

KERNELS(f16, u16, ld_f16, st_f16)
HALF_KERNELS(f16, ld_f16, st_f16)
KERNELS(bf16, u16, ld_bf16, st_bf16)
HALF_KERNELS(bf16, ld_bf16, st_bf16)
KERNELS(f32, float, ld_f32, st_f32)

/* GroupNorm 8 channels a thread, for c and the group's channels cg multiples of 8 (unet.go's
   GroupNorm): group_stats8 sums, group_finalize turns the sums into each channel's mean and
   rstd * scale once, group_apply8 normalises (and adds a residual). */
#define GROUP_NORM8(T, S, LD, ST)                                                                       \
/* group_stats8: stats[f*groups + g] += (sum, sum of squares) of group g of frame f. Thread t reads   \
   channel vector v = t % nv (nv = c/8, blockDim.x = nv * pixels a block) of the pixels t / nv,       \
   stepping by all the blocks' pixels, sums its 8 values in float and its pixels in double; lanes of  \
   one v meet by shuffles (when nv divides 32), then in shared memory, then one atomic per group and   \
   block. Launch: grid (chunks, n), block nv * (256 / nv); groups <= 64; stats zeroed first. */       \
extern "C" __global__ void group_stats8_##T(const uint4* __restrict__ x, double* __restrict__ stats,    \
                                            int px, int c, int cg) {                                   \
    const int VI = sizeof(S) / 2;                                                                      \
    __shared__ double sh[128];                                                                         \
    int nv = c / 8, ppb = blockDim.x / nv, v = threadIdx.x % nv, f = blockIdx.y, groups = c / cg;     \
    for (int i = threadIdx.x; i < 2 * groups; i += blockDim.x) sh[i] = 0.0;                            \
    __syncthreads();                                                                                   \
    double s = 0.0, q = 0.0;                                                                           \
    if (threadIdx.x < nv * ppb)                                                                        \
        for (int p = blockIdx.x * ppb + threadIdx.x / nv; p < px; p += gridDim.x * ppb) {               \
            union { uint4 u[VI]; S e[8]; } a;                                                          \
            long long o = ((long long)f * px + p) * nv + v;                                            \
            for (int k = 0; k < VI; k++) a.u[k] = x[o * VI + k];                                       \
            float ps = 0.0f, pq = 0.0f;                                                                \
            for (int k = 0; k < 8; k++) { float e = LD(a.e[k]); ps += e; pq += e * e; }                \
            s += ps; q += pq;                                                                          \
        }                                                                                              \
    bool lead = threadIdx.x < nv * ppb;                                                                \
    if (32 % nv == 0 && blockDim.x % 32 == 0) {                                                        \
        for (int o = nv; o < 32; o <<= 1) { s += __shfl_xor_sync(0xffffffffu, s, o); q += __shfl_xor_sync(0xffffffffu, q, o); } \
        lead = lead && (threadIdx.x % 32) < nv;                                                        \
    }                                                                                                  \
    if (lead) { int g = v * 8 / cg; atomicAdd(&sh[2 * g], s); atomicAdd(&sh[2 * g + 1], q); }         \
    __syncthreads();                                                                                   \
    for (int i = threadIdx.x; i < 2 * groups; i += blockDim.x) atomicAdd(&stats[2 * f * groups + i], sh[i]); \
}                                                                                                      \
/* group_apply8: out = (x - mean[f][ch]) * ar[f][ch] + shift[ch] (+ res), 8 channels a thread, the    \
   pixels of frame blockIdx.y; ma holds (mean, rstd * scale) per frame and channel (group_finalize);   \
   res may be 0. Launch: grid (chunks, n), block 256. */                                              \
extern "C" __global__ void group_apply8_##T(const uint4* __restrict__ x, const float* __restrict__ ma,  \
                                            const float* __restrict__ shift, const uint4* __restrict__ res, \
                                            uint4* __restrict__ out, int px, int c) {                  \
    const int VI = sizeof(S) / 2;                                                                      \
    int nv = c / 8, f = blockIdx.y;                                                                    \
    const float* m = ma + 2LL * f * c;                                                                 \
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)px * nv; i += gridDim.x * blockDim.x) { \
        union { uint4 u[VI]; S e[8]; } a, r;                                                           \
        long long o = ((long long)f * px * nv + i) * VI;                                               \
        int ch = (i % nv) * 8;                                                                         \
        for (int k = 0; k < VI; k++) a.u[k] = x[o + k];                                                \
        if (res) for (int k = 0; k < VI; k++) r.u[k] = res[o + k];                                     \
        for (int k = 0; k < 8; k++) {                                                                  \
            float y = (LD(a.e[k]) - m[2 * (ch + k)]) * m[2 * (ch + k) + 1] + shift[ch + k];            \
            if (res) y += LD(r.e[k]);                                                                  \
            a.e[k] = ST(y);                                                                            \
        }                                                                                              \
        for (int k = 0; k < VI; k++) out[o + k] = a.u[k];                                              \
    }                                                                                                  \
}
GROUP_NORM8(f16, u16, ld_f16, st_f16)
GROUP_NORM8(bf16, u16, ld_bf16, st_bf16)
GROUP_NORM8(f32, float, ld_f32, st_f32)

/* group_finalize: ma[2*(f*c + ch)] and the next = (mean, rstd * scale[ch]) of channel ch's group in frame f, from
   group_stats8's sums over cnt values (in double), a frame and channel a thread. */
extern "C" __global__ void group_finalize(const double* __restrict__ stats, const float* __restrict__ scale,
                                          float* __restrict__ ma, int n, int c, int cg, double cnt, float eps) {
    GRID_STRIDE(i, (long long)n * c) {
        int f = (int)(i / c), ch = (int)(i % c), fg = f * (c / cg) + ch / cg;
        double mean = stats[2 * fg] / cnt, var = fmax(stats[2 * fg + 1] / cnt - mean * mean, 0.0);
        ma[2 * i] = (float)mean;
        ma[2 * i + 1] = (float)(1.0 / sqrt(var + (double)eps)) * scale[ch];
    }
}

/* copy_block8: copy_block_wW 16 bytes at a time (every size and offset in 16-byte chunks). */
extern "C" __global__ void copy_block8(const uint4* __restrict__ src, uint4* __restrict__ dst, long long rows, long long n,
                                       long long ss, long long so, long long ds, long long d0) {
    GRID_STRIDE(i, rows * n) dst[i / n * ds + d0 + i % n] = src[i / n * ss + so + i % n];
}

/* Motion ops (CDA-VSR), in the CPU backend's float32 arithmetic (backend/cpu/motion.go).
   nearest_coord: PyTorch's normalise / un-normalise (align_corners=True) round trip of coordinate c
   on an axis of n pixels, each step rounded (no fused multiply-add), border clamp, ties to even. */
__device__ __forceinline__ int nearest_coord(float c, int n) {
    if (n == 1) return 0;
    float m = (float)(n - 1);
    float g = __fadd_rn(__fdiv_rn(__fmul_rn(2.0f, c), m), -1.0f);
    float u = __fmul_rn(__fdiv_rn(__fadd_rn(g, 1.0f), 2.0f), m);
    u = fminf(fmaxf(u, 0.0f), m);
    return (int)rintf(u);
}

/* deform_pt: where deform_sample samples for one group of one pixel: the mask, the bilinear
   weights, frame f and top-left corner (y0, x0), whether the point is inside the image at all (in)
   and which of its four corners are (c[k]: corner (y0 + k/2, x0 + k%2)). */
struct deform_pt { float mask, hh, hw, lh, lw; long long f; int y0, x0; bool in, c[4]; };

#define WARP_KERNELS(T, S, LD, ST, M, LDM)                                                                  \
/* warp_src: the pixel warp_nearest reads for pixel p: p + mv(p) (x then y), nearest, clamped. */   \
__device__ __forceinline__ long long warp_src_##T(const M* __restrict__ mv, long long p, int h, int w) { \
    int px = p % w, py = (p / w) % h; long long f = p / ((long long)w * h);                         \
    int sx = nearest_coord(__fadd_rn((float)px, LDM(mv[2 * p])), w);                                 \
    int sy = nearest_coord(__fadd_rn((float)py, LDM(mv[2 * p + 1])), h);                             \
    return (f * h + sy) * w + sx;                                                                   \
}                                                                                                   \
/* deform_at: mmcv's modulated bilinear sampling point of a 1x1 DCNv2 for group g of pixel p, with  \
   offsets limit*tanh(o) + mv and mask sigmoid(o[2G + g]). */                                       \
__device__ __forceinline__ deform_pt deform_at_##T(const S* __restrict__ o, const M* __restrict__ mv, \
        long long p, int g, int groups, int h, int w, float limit) {                                \
    deform_pt d;                                                                                    \
    int px = p % w, py = (p / w) % h; d.f = p / ((long long)w * h);                                 \
    const S* op = o + p * 3 * groups;                                                               \
    float dy = __fadd_rn(__fmul_rn(limit, tanhf(LD(op[2 * g]))), LDM(mv[2 * p + 1]));                \
    float dx = __fadd_rn(__fmul_rn(limit, tanhf(LD(op[2 * g + 1]))), LDM(mv[2 * p]));                \
    d.mask = 1.0f / (1.0f + expf(-LD(op[2 * groups + g])));                                         \
    float hy = __fadd_rn((float)py, dy), wx = __fadd_rn((float)px, dx);                             \
    d.in = hy > -1.0f && wx > -1.0f && hy < (float)h && wx < (float)w;                              \
    d.hh = d.hw = d.lh = d.lw = 0.0f; d.y0 = d.x0 = 0;                                              \
    if (d.in) {                                                                                     \
        float hl = floorf(hy), wl = floorf(wx);                                                     \
        d.lh = hy - hl; d.lw = wx - wl; d.hh = 1.0f - d.lh; d.hw = 1.0f - d.lw;                     \
        d.y0 = (int)hl; d.x0 = (int)wl;                                                             \
    }                                                                                               \
    for (int k = 0; k < 4; k++) {                                                                   \
        int y = d.y0 + (k >> 1), x = d.x0 + (k & 1);                                                \
        d.c[k] = d.in && y >= 0 && x >= 0 && y <= h - 1 && x <= w - 1;                              \
    }                                                                                               \
    return d;                                                                                       \
}                                                                                                   \
/* warp_nearest: out[p] = x[p + mv(p)], per value. */                                              \
extern "C" __global__ void warp_nearest_##T(const S* __restrict__ x, const M* __restrict__ mv,   \
                                            S* __restrict__ out, int n, int h, int w, int c) {   \
    GRID_STRIDE(i, (long long)n * h * w * c) out[i] = x[warp_src_##T(mv, i / c, h, w) * c + i % c]; \
}                                                                                                   \
/* deform_sample: the sampled value times the mask, zero outside the image, per value. */          \
extern "C" __global__ void deform_sample_##T(const S* __restrict__ x, const S* __restrict__ o,  \
        const M* __restrict__ mv, S* __restrict__ out, int n, int h, int w, int c, int groups,  \
        float limit) {                                                                              \
    int cg = c / groups;                                                                            \
    GRID_STRIDE(i, (long long)n * h * w * c) {                                                      \
        int ch = i % c; long long p = i / c;                                                        \
        deform_pt d = deform_at_##T(o, mv, p, ch / cg, groups, h, w, limit);                       \
        float v = 0.0f;                                                                             \
        if (d.in) {                                                                                 \
            const S* img = x + d.f * h * w * c + ch;                                                \
            float vk[4];                                                                            \
            for (int k = 0; k < 4; k++)                                                             \
                vk[k] = d.c[k] ? LD(img[((long long)(d.y0 + (k >> 1)) * w + d.x0 + (k & 1)) * c]) : 0.0f; \
            v = d.hh * d.hw * vk[0] + d.hh * d.lw * vk[1] + d.lh * d.hw * vk[2] + d.lh * d.lw * vk[3]; \
        }                                                                                           \
        out[i] = ST(d.mask * v);                                                                    \
    }                                                                                               \
}                                                                                                   \
/* The same two ops 16 bytes (V values) at a time, for pixels (warp_nearest_v) or groups           \
   (deform_sample_v) a whole number of 16-byte chunks, c8 chunks per pixel: each thread works out   \
   its pixel's source or sampling point once for V channels. Same arithmetic. */                    \
extern "C" __global__ void warp_nearest_v_##T(const uint4* __restrict__ x, const M* __restrict__ mv, \
                                              uint4* __restrict__ out, int n, int h, int w, int c8) { \
    GRID_STRIDE(i, (long long)n * h * w * c8) out[i] = x[warp_src_##T(mv, i / c8, h, w) * c8 + i % c8]; \
}                                                                                                   \
extern "C" __global__ void deform_sample_v_##T(const uint4* __restrict__ x, const S* __restrict__ o, \
        const M* __restrict__ mv, uint4* __restrict__ out, int n, int h, int w, int c8, int groups, \
        float limit) {                                                                              \
    const int V = 16 / sizeof(S);                                                                   \
    int cg8 = c8 / groups;                                                                          \
    GRID_STRIDE(i, (long long)n * h * w * c8) {                                                     \
        int q = i % c8; long long p = i / c8;                                                       \
        deform_pt d = deform_at_##T(o, mv, p, q / cg8, groups, h, w, limit);                       \
        union { uint4 u; S s[V]; } c[4], r;                                                         \
        const uint4* img = x + d.f * h * w * c8 + q;                                                \
        for (int k = 0; k < 4; k++) {                                                               \
            c[k].u.x = c[k].u.y = c[k].u.z = c[k].u.w = 0;                                          \
            if (d.c[k]) c[k].u = img[((long long)(d.y0 + (k >> 1)) * w + d.x0 + (k & 1)) * c8];     \
        }                                                                                           \
        for (int e = 0; e < V; e++) {                                                               \
            float v = 0.0f;                                                                         \
            if (d.in) v = d.hh * d.hw * LD(c[0].s[e]) + d.hh * d.lw * LD(c[1].s[e]) + d.lh * d.hw * LD(c[2].s[e]) + d.lh * d.lw * LD(c[3].s[e]); \
            r.s[e] = ST(d.mask * v);                                                                \
        }                                                                                           \
        out[i] = r.u;                                                                               \
    }                                                                                               \
}

/* M is the motion field's type: the storage type, or float32 beside it ("m" kernels, backend.Wide). */
WARP_KERNELS(f16, u16, ld_f16, st_f16, u16, ld_f16)
WARP_KERNELS(bf16, u16, ld_bf16, st_bf16, u16, ld_bf16)
WARP_KERNELS(f32, float, ld_f32, st_f32, float, ld_f32)
WARP_KERNELS(f16m, u16, ld_f16, st_f16, float, ld_f32)
WARP_KERNELS(bf16m, u16, ld_bf16, st_bf16, float, ld_f32)

#define MOTION_KERNELS(T, S, LD, ST)                                                                      \
extern "C" __global__ void gate_v_##T(const uint4* __restrict__ x, const S* __restrict__ wm,     \
                                      uint4* __restrict__ out, long long px, int c8, int sig) {  \
    const int V = 16 / sizeof(S);                                                                   \
    GRID_STRIDE(i, px * c8) {                                                                       \
        float wv = LD(wm[i / c8]);                                                                  \
        float g = sig ? 1.0f / (1.0f + expf(-wv)) : 1.0f + wv;                                      \
        union { uint4 u; S s[V]; } r;                                                               \
        r.u = x[i];                                                                                 \
        for (int e = 0; e < V; e++) r.s[e] = ST(LD(r.s[e]) * g);                                    \
        out[i] = r.u;                                                                               \
    }                                                                                               \
}                                                                                                   \
/* mean_abs: *out = the mean |x| of n values, summed in double by one CTA of 1024 threads in a    \
   fixed order (a strided sum per thread, then a tree), so that the result is the same every run.  \
   Launch: one block of 1024 threads. */                                                           \
extern "C" __global__ void mean_abs_##T(const S* __restrict__ x, long long n, double* __restrict__ out) { \
    __shared__ double part[1024];                                                                   \
    double s = 0.0;                                                                                 \
    for (long long i = threadIdx.x; i < n; i += 1024) s += fabs((double)LD(x[i]));                \
    part[threadIdx.x] = s;                                                                          \
    __syncthreads();                                                                                \
    for (int h = 512; h > 0; h >>= 1) {                                                             \
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];                            \
        __syncthreads();                                                                            \
    }                                                                                               \
    if (threadIdx.x == 0) *out = part[0] / (double)n;                                               \
}                                                                                                   \
/* gate: out = x * (1 + w), or x * sigmoid(w), w one value per pixel. */                            \
extern "C" __global__ void gate_##T(const S* __restrict__ x, const S* __restrict__ wm,          \
                                    S* __restrict__ out, long long px, int c, int sig) {         \
    GRID_STRIDE(i, px * c) {                                                                        \
        float wv = LD(wm[i / c]);                                                                   \
        float g = sig ? 1.0f / (1.0f + expf(-wv)) : 1.0f + wv;                                      \
        out[i] = ST(LD(x[i]) * g);                                                                  \
    }                                                                                               \
}

MOTION_KERNELS(f16, u16, ld_f16, st_f16)
MOTION_KERNELS(bf16, u16, ld_bf16, st_bf16)
MOTION_KERNELS(f32, float, ld_f32, st_f32)

/* copy_channels_A_B: channels [at, at+c) of out (oc channels) = in (c channels), converted from type
   A to type B: float32 tensors beside the storage type (backend.Wide). */
#define COPY_CHANNELS(A, SA, LDA, B, SB, STB)                                                             \
extern "C" __global__ void copy_channels_##A##_##B(const SA* __restrict__ in, SB* __restrict__ out,    \
                                                   long long px, int c, int oc, int at) {               \
    GRID_STRIDE(i, px * c) out[(i / c) * oc + at + i % c] = STB(LDA(in[i]));                            \
}
COPY_CHANNELS(f16, u16, ld_f16, f32, float, st_f32)
COPY_CHANNELS(f32, float, ld_f32, f16, u16, st_f16)
COPY_CHANNELS(bf16, u16, ld_bf16, f32, float, st_f32)
COPY_CHANNELS(f32, float, ld_f32, bf16, u16, st_bf16)

/* shuffle_add_bilinear_X_B: the tail of CDA-VSR in one pass, one thread per output pixel:
   out = PixelShuffle(x, r, order) + Resize(base, Bilinear) with x (n,h,w,3*r*r) of type X and base
   (n,h,w,3) of type B, the output of type B (backend.BilinearShuffleAdder), with the taps and the
   arithmetic of resize_px and each value rounded to B where the separate ops round it. */
#define SHUFFLE_ADD_BILINEAR(XN, XS, XLD, BN, BS, BLD, BST)                                              \
extern "C" __global__ void shuffle_add_bilinear_##XN##_##BN(                                           \
        const XS* __restrict__ x, const BS* __restrict__ base, BS* __restrict__ out, int n, int h, int w, \
        int r, int order, const int* __restrict__ iy, const float* __restrict__ wy, int nty,            \
        const int* __restrict__ ix, const float* __restrict__ wx, int ntx) {                            \
    const int H = h * r, W = w * r;                                                                     \
    GRID_STRIDE(i, (long long)n * H * W) {                                                              \
        int X = i % W; long long t = i / W;                                                             \
        int Y = t % H; int f = t / H;                                                                   \
        float acc[3] = {0.0f, 0.0f, 0.0f};                                                              \
        for (int a = 0; a < nty; a++) {                                                                 \
            const BS* row = base + (((long long)f * h + iy[Y * nty + a]) * w) * 3;                      \
            float v[3] = {0.0f, 0.0f, 0.0f};                                                            \
            for (int b = 0; b < ntx; b++) {                                                             \
                const BS* px = row + (long long)ix[X * ntx + b] * 3;                                    \
                float wt = wx[X * ntx + b];                                                             \
                _Pragma("unroll") for (int ch = 0; ch < 3; ch++) v[ch] += BLD(px[ch]) * wt;             \
            }                                                                                           \
            float wt = wy[Y * nty + a];                                                                 \
            _Pragma("unroll") for (int ch = 0; ch < 3; ch++) acc[ch] += v[ch] * wt;                     \
        }                                                                                               \
        int ii = Y % r, j = X % r;                                                                      \
        long long p = ((long long)f * h + Y / r) * w + X / r;                                           \
        _Pragma("unroll") for (int c = 0; c < 3; c++) {                                                 \
            int ic = order == 0 ? c * r * r + ii * r + j : (ii * r + j) * 3 + c;                       \
            out[i * 3 + c] = BST(XLD(x[p * (3 * r * r) + ic]) + BLD(BST(acc[c])));                      \
        }                                                                                               \
    }                                                                                                   \
}
SHUFFLE_ADD_BILINEAR(f16, u16, ld_f16, f32, float, ld_f32, st_f32)
SHUFFLE_ADD_BILINEAR(bf16, u16, ld_bf16, f32, float, ld_f32, st_f32)
SHUFFLE_ADD_BILINEAR(f32, float, ld_f32, f32, float, ld_f32, st_f32)
SHUFFLE_ADD_BILINEAR(f16, u16, ld_f16, f16, u16, ld_f16, st_f16)
SHUFFLE_ADD_BILINEAR(bf16, u16, ld_bf16, bf16, u16, ld_bf16, st_bf16)

/* copy_channels8_A_B: copy_channels_A_B 8 channels a thread, in 16-byte loads and stores: c8 = c/8,
   and c, oc and at multiples of 8. */
#define COPY_CHANNELS8(A, SA, LDA, B, SB, STB)                                                            \
extern "C" __global__ void copy_channels8_##A##_##B(const uint4* __restrict__ in, uint4* __restrict__ out, \
                                                    long long px, int c8, int oc, int at) {               \
    const int VI = sizeof(SA) / 2, VO = sizeof(SB) / 2; /* 16-byte words per 8 values */               \
    GRID_STRIDE(i, px * c8) {                                                                           \
        union { uint4 u[VI]; SA e[8]; } a;                                                              \
        union { uint4 u[VO]; SB e[8]; } b;                                                              \
        for (int k = 0; k < VI; k++) a.u[k] = in[i * VI + k];                                           \
        for (int k = 0; k < 8; k++) b.e[k] = STB(LDA(a.e[k]));                                          \
        long long o = ((i / c8) * oc + at + (i % c8) * 8) / 8 * VO;                                     \
        for (int k = 0; k < VO; k++) out[o + k] = b.u[k];                                               \
    }                                                                                                   \
}
COPY_CHANNELS8(f16, u16, ld_f16, f32, float, st_f32)
COPY_CHANNELS8(f32, float, ld_f32, f16, u16, st_f16)
COPY_CHANNELS8(bf16, u16, ld_bf16, f32, float, st_f32)
COPY_CHANNELS8(f32, float, ld_f32, bf16, u16, st_bf16)

/* match_blocks: block matching with quarter-pel refinement, one CTA (256 threads) per block, in the
   CPU backend's order of decisions (MatchBlocks in backend/cpu/motion.go): whole-pixel candidates
   split over the threads, the smallest SAD over the widened block (ties: zero vector, then raster
   order), then the 8 half-pel and the 8 quarter-pel neighbours in order. cur's window is staged in
   shared memory (block <= 16, so a window of at most 32 x 32). With staged != 0 the search area of
   prev (the window widened by rng on each side, clamped as the CPU clamps) is staged too, in the
   dynamic shared memory the launch gives (mbStagedBytes in motion.go), and each thread sums MB_RUN
   horizontally adjacent candidates at once, each prev value loaded once for all of them: every
   candidate's SAD is still summed over y, then x, so the decisions are those of the unstaged search.
   Otherwise prev is read through the cache. The refinement reads prev through the cache. */
#define MB_THREADS 256
#define MB_RUN 5
__device__ __forceinline__ float mb_sample(const float* p, int w, int h, float x, float y) {
    x = fminf(fmaxf(x, 0.0f), (float)(w - 1));
    y = fminf(fmaxf(y, 0.0f), (float)(h - 1));
    int x0 = (int)x, y0 = (int)y, x1 = min(x0 + 1, w - 1), y1 = min(y0 + 1, h - 1);
    float fx = x - x0, fy = y - y0;
    float a = p[y0 * w + x0] + fx * (p[y0 * w + x1] - p[y0 * w + x0]);
    float c = p[y1 * w + x0] + fx * (p[y1 * w + x1] - p[y1 * w + x0]);
    return a + fy * (c - a);
}
/* plane_f32: a (n,h,w,1) plane in storage T to float32, for the matcher's reads. */
#define MATCH_KERNELS(T, S, LD, ST)                                                                        \
extern "C" __global__ void plane_f32_##T(const S* __restrict__ in, float* __restrict__ out, long long n) { \
    GRID_STRIDE(i, n) out[i] = LD(in[i]);                                                            \
}                                                                                                    \
extern "C" __global__ void match_out_##T(const float* __restrict__ mvf, const float* __restrict__ resf, \
                                         S* __restrict__ mv, S* __restrict__ res, long long px) { \
    GRID_STRIDE(i, px) { mv[2 * i] = ST(mvf[2 * i]); mv[2 * i + 1] = ST(mvf[2 * i + 1]); res[i] = ST(resf[i]); } \
}

MATCH_KERNELS(f16, u16, ld_f16, st_f16)
MATCH_KERNELS(bf16, u16, ld_bf16, st_bf16)
MATCH_KERNELS(f32, float, ld_f32, st_f32)

extern "C" __global__ void match_blocks(const float* __restrict__ cur, const float* __restrict__ prev,
                                        float* __restrict__ mv, float* __restrict__ res,
                                        int h, int w, int block, int rng, float scale, int staged) {
    extern __shared__ float area[]; /* staged: prev's search area, rows of PW floats, MB_RUN spare */
    __shared__ float win[32 * 32];
    __shared__ float bsad[MB_THREADS];
    __shared__ int bord[MB_THREADS];
    __shared__ float vec[2];
    const int bw = (w + block - 1) / block, bh = (h + block - 1) / block;
    const int nb = blockIdx.x, n = nb / (bw * bh), r = nb % (bw * bh);
    const int bx0 = (r % bw) * block, by0 = (r / bw) * block;
    const int bww = min(block, w - bx0), bhh = min(block, h - by0), margin = block / 2;
    const int x0 = max(bx0 - margin, 0), y0 = max(by0 - margin, 0);
    const int x1 = min(bx0 + bww + margin, w), y1 = min(by0 + bhh + margin, h);
    const int ww = x1 - x0, wh = y1 - y0;
    const float* c = cur + (long long)n * h * w;
    const float* p = prev + (long long)n * h * w;
    for (int i = threadIdx.x; i < ww * wh; i += MB_THREADS) win[i] = c[(y0 + i / ww) * w + x0 + i % ww];
    __syncthreads();
    const int side = 2 * rng + 1, cands = side * side;
    float best = 3.4e38f; int order = 0x7fffffff;
    if (staged) {
        /* area[yy * PW + xx] = prev at (x0 - rng + xx, y0 - rng + yy), clamped; PW odd, so that the
           threads of a warp (different rows of candidates) read different banks. */
        const int aw = ww + 2 * rng, ah = wh + 2 * rng, PW = aw | 1;
        for (int i = threadIdx.x; i < ah * aw; i += MB_THREADS) {
            int yy = i / aw, xx = i % aw;
            int sy = min(max(y0 - rng + yy, 0), h - 1), sx = min(max(x0 - rng + xx, 0), w - 1);
            area[yy * PW + xx] = p[sy * w + sx];
        }
        for (int i = threadIdx.x; i < MB_RUN; i += MB_THREADS) area[ah * PW + i] = 0.0f; /* read past the last row */
        __syncthreads();
        const int runs = (side + MB_RUN - 1) / MB_RUN;
        for (int item = threadIdx.x; item < side * runs; item += MB_THREADS) {
            const int ry = item / runs, rx = (item % runs) * MB_RUN; /* candidates (rx..rx+MB_RUN-1, ry) */
            float s[MB_RUN];
#pragma unroll
            for (int j = 0; j < MB_RUN; j++) s[j] = 0.0f;
            for (int y = 0; y < wh; y++) {
                const float* a = area + (y + ry) * PW + rx;
                const float* cw = win + y * ww;
                float q[MB_RUN];
#pragma unroll
                for (int j = 0; j < MB_RUN - 1; j++) q[j] = a[j];
                for (int x = 0; x < ww; x++) {
                    q[MB_RUN - 1] = a[x + MB_RUN - 1];
                    const float cv = cw[x];
#pragma unroll
                    for (int j = 0; j < MB_RUN; j++) s[j] += fabsf(cv - q[j]);
#pragma unroll
                    for (int j = 0; j < MB_RUN - 1; j++) q[j] = q[j + 1];
                }
            }
#pragma unroll
            for (int j = 0; j < MB_RUN; j++) {
                if (rx + j >= side) break;
                int dy = ry - rng, dx = rx + j - rng, k = ry * side + rx + j;
                int o = (dx == 0 && dy == 0) ? -1 : k;
                if (s[j] < best || (s[j] == best && o < order)) { best = s[j]; order = o; }
            }
        }
    }
    for (int k = staged ? cands : threadIdx.x; k < cands; k += MB_THREADS) {
        int dy = k / side - rng, dx = k % side - rng;
        float s = 0.0f;
        for (int y = 0; y < wh; y++) {
            int sy = min(max(y0 + y + dy, 0), h - 1);
            for (int x = 0; x < ww; x++) {
                int sx = min(max(x0 + x + dx, 0), w - 1);
                s += fabsf(win[y * ww + x] - p[sy * w + sx]);
            }
        }
        int o = (dx == 0 && dy == 0) ? -1 : k;
        if (s < best || (s == best && o < order)) { best = s; order = o; }
    }
    bsad[threadIdx.x] = best; bord[threadIdx.x] = order;
    __syncthreads();
    for (int stride = MB_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            float s2 = bsad[threadIdx.x + stride]; int o2 = bord[threadIdx.x + stride];
            if (s2 < bsad[threadIdx.x] || (s2 == bsad[threadIdx.x] && o2 < bord[threadIdx.x])) {
                bsad[threadIdx.x] = s2; bord[threadIdx.x] = o2;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        int o = bord[0];
        vec[0] = o < 0 ? 0.0f : (float)(o % side - rng);
        vec[1] = o < 0 ? 0.0f : (float)(o / side - rng);
    }
    __syncthreads();
    const float dirs[8][2] = {{-1, -1}, {0, -1}, {1, -1}, {-1, 0}, {1, 0}, {-1, 1}, {0, 1}, {1, 1}};
    float cbest = bsad[0];
    for (int step = 0; step < 2; step++) {
        float st = step == 0 ? 0.5f : 0.25f;
        float cx = vec[0], cy = vec[1];
        __syncthreads();
        /* 8 candidates x 32 threads each: a warp per candidate sums its window. */
        int cand = threadIdx.x / 32, lane = threadIdx.x % 32;
        float tx = cx + st * dirs[cand][0], ty = cy + st * dirs[cand][1];
        float s = 0.0f;
        for (int i = lane; i < ww * wh; i += 32) {
            int y = i / ww, x = i % ww;
            s += fabsf(win[i] - mb_sample(p, w, h, (float)(x0 + x) + tx, (float)(y0 + y) + ty));
        }
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
        if (lane == 0) bsad[cand] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int k = 0; k < 8; k++) {
                if (bsad[k] < cbest) { cbest = bsad[k]; vec[0] = cx + st * dirs[k][0]; vec[1] = cy + st * dirs[k][1]; }
            }
            bsad[8] = cbest;
        }
        __syncthreads();
        cbest = bsad[8];
    }
    const float vx = vec[0], vy = vec[1];
    for (int i = threadIdx.x; i < bww * bhh; i += MB_THREADS) {
        int x = bx0 + i % bww, y = by0 + i / bww;
        long long q = (long long)n * h * w + (long long)y * w + x;
        mv[2 * q] = vx; mv[2 * q + 1] = vy;
        res[q] = (c[y * w + x] - mb_sample(p, w, h, (float)x + vx, (float)y + vy)) * scale;
    }
}

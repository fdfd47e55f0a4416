// Host-compiler stand-ins for the CUDA built-ins vsr's kernels use, so that
// g++ -fsyntax-only can check the .cu files where no CUDA compiler exists
// (TestKernelSyntax). Declarations only: nothing here runs.
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__
#define __launch_bounds__(...)
struct uint3_ { unsigned x, y, z; };
extern uint3_ threadIdx, blockIdx, blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct int4 { int x, y, z, w; };
struct __half {};
typedef unsigned long long size_t_;
float __uint_as_float(unsigned);
unsigned __float_as_uint(float);
int __float_as_int(float);
float __int_as_float(int);
void __syncthreads();
void __syncwarp(unsigned m=0xffffffff);
float __shfl_xor_sync(unsigned, float, int, int w=32);
int __shfl_xor_sync(unsigned, int, int, int w=32);
unsigned __shfl_xor_sync(unsigned, unsigned, int, int w=32);
double __shfl_xor_sync(unsigned, double, int, int w=32);
float __shfl_down_sync(unsigned, float, int, int w=32);
double __shfl_down_sync(unsigned, double, int, int w=32);
float __shfl_sync(unsigned, float, int, int w=32);
float __expf(float); float __frcp_rn(float); float __fdividef(float,float);
float exp2f(float); float expf(float); float tanhf(float); float fminf(float,float); float fmaxf(float,float);
float floorf(float); float ceilf(float); float rintf(float); float fabsf(float); float sqrtf(float); float rsqrtf(float); float erff(float); float roundf(float); float nearbyintf(float); float logf(float); float sinf(float); float cosf(float); float powf(float,float); float truncf(float);
double fabs(double); double fmax(double,double); double sqrt(double); float log1pf(float);
int min(int,int); int max(int,int); long long min(long long,long long); long long max(long long,long long);
unsigned min(unsigned,unsigned); unsigned max(unsigned,unsigned);
float atomicAdd(float*, float); int atomicAdd(int*, int); double atomicAdd(double*, double); unsigned atomicAdd(unsigned*, unsigned);
int atomicMax(int*, int); int atomicMin(int*, int);
unsigned __cvta_generic_to_shared(const void*);
#define __grid_constant__
float fmaf(float,float,float); float __fadd_rn(float,float); float __fmul_rn(float,float); float __fdiv_rn(float,float); float __fsub_rn(float,float); float __fmaf_rn(float,float,float);
void sincosf(float, float*, float*); float exp2f(float); float log2f(float); float __log2f(float); float __exp2f(float);
int __float2int_rn(float); int __float2int_rd(float); int __float2int_rz(float); float __int2float_rn(int); unsigned __float2uint_rn(float);

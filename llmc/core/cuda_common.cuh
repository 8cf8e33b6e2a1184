// cuda_common.cuh: the GPU context passed to every launcher (device, stream, cuBLASLt handle and
// workspace, the GEMM plans it tuned, where profile marks go), the bf16 type, the 128-bit packed vector
// of the elementwise kernels, and small device helpers shared by the kernels.
// No mutable globals: everything a launcher needs or keeps travels in a GpuContext, so two contexts (two
// GPUs, two threads, two tests) never share state. llmc/'s one global is the crash handlers' pointer in
// llmc/dist/dist_report.h (a signal handler reaches nothing else); dev/test/core/test_llmc_globals.sh checks.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include "check.h"
#include "profile.h"

typedef __nv_bfloat16 bf16;

#define CUBLASLT_WORKSPACE_BYTES (32u << 20)  // what cuBLASLt's Hopper kernels ask for at most

// --- the GEMM plans a context keeps ----------------------------------------------------------
// A plan: cuBLASLt's descriptors and the algorithm its heuristic picked for one GEMM shape (types,
// transposes, leading dimensions, sizes, epilogue); llmc/layers/matmul.cuh makes and runs them. The
// pointers and alpha/beta come with each run. The heuristic assumes 256-byte aligned pointers
// (cuBLASLt's default preference), as every caller has. The type lives here, under the layers, because a
// context owns the plans it tuned and frees them with itself.
typedef struct {
    cudaDataType_t d_type;
    int ldd, lda, trans_a, ldb, trans_b, M, N, K, epilogue, ld_aux;  // the key (epilogue: MATMUL_EPILOGUE_*)
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    float waves;  // the heuristic's estimate of how many waves of the GPU's SMs the algorithm's tiles fill
} MatmulPlan;

static inline void matmul_plan_free(MatmulPlan* p) {
    cublas_check(cublasLtMatrixLayoutDestroy(p->la));
    cublas_check(cublasLtMatrixLayoutDestroy(p->lb));
    cublas_check(cublasLtMatrixLayoutDestroy(p->ld));
    cublas_check(cublasLtMatmulDescDestroy(p->op));
}

// The plans gemm_tune tuned on one context, one per GEMM shape, kept until gpu_context_free
// (llmc/layers/matmul.cuh fills them). Not locked: one thread uses a context at a time.
#define MATMUL_TUNED_PLANS 64
typedef struct {
    MatmulPlan plan[MATMUL_TUNED_PLANS];
    int n;
} MatmulTuned;

typedef struct {
    int device;
    int sm_count;
    size_t l2_bytes;
    cudaStream_t stream;     // non-blocking: a plain cudaMemcpy or cudaMemset (legacy stream) neither waits
                             // for it nor is waited for; synchronise before reading back, and after uploads
    cublasLtHandle_t lt;
    void* lt_workspace;      // (CUBLASLT_WORKSPACE_BYTES) scratch for cuBLASLt
    size_t lt_workspace_bytes;
    int gemm_tune;           // 1: each GEMM shape's first call picks cuBLASLt's fastest algorithm of those giving
                             // the heuristic's bits (llmc/layers/matmul.cuh); 0: the heuristic's first pick
    MatmulTuned* gemm_tuned; // (heap) the plans gemm_tune picked on this context: a copy of the context (another
                             // stream, gemm_tune set) shares them, a context built apart has its own
    Profile* prof;           // NULL, or where each launcher marks the end of its work (./train_gpt -profile 1)
} GpuContext;

static inline void gpu_context_build(GpuContext* ctx, int device) {
    int count = 0;
    cuda_check(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
        check_failf("check CUDA_VISIBLE_DEVICES", "GPU %d requested, but %d GPU(s) are visible", device, count);
    cuda_check(cudaSetDevice(device));
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, device));
    ctx->device = device;
    ctx->sm_count = prop.multiProcessorCount;
    ctx->l2_bytes = (size_t)prop.l2CacheSize;
    cuda_check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    cublas_check(cublasLtCreate(&ctx->lt));
    ctx->lt_workspace_bytes = CUBLASLT_WORKSPACE_BYTES;
    cuda_check(cudaMalloc(&ctx->lt_workspace, ctx->lt_workspace_bytes));
    ctx->gemm_tune = 0;
    ctx->gemm_tuned = (MatmulTuned*)calloc_check(1, sizeof(MatmulTuned));
    ctx->prof = NULL;
}

static inline void gpu_context_free(GpuContext* ctx) {
    if (ctx->gemm_tuned) {
        for (int i = 0; i < ctx->gemm_tuned->n; i++) matmul_plan_free(&ctx->gemm_tuned->plan[i]);
        free(ctx->gemm_tuned);
        ctx->gemm_tuned = NULL;
    }
    cuda_check(cudaFree(ctx->lt_workspace));
    cublas_check(cublasLtDestroy(ctx->lt));
    cuda_check(cudaStreamDestroy(ctx->stream));
}

__host__ __device__ static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// --- device helpers --------------------------------------------------------------------------

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// --- a row in a warp's registers ------------------------------------------------------------
// The row kernels of llmc/layers/layernorm.cuh and llmc/layers/rmsnorm.cuh give each warp one row of C channels, kept
// in registers as K = ceil(C / 256) groups of 8 channels per lane; K is a template parameter, so the
// registers are indexed at compile time. ROW_MAX_C is the widest row they take (K = 8).
#define ROW_MAX_C 2048

// Runs the statement `...` with the constant K = ceil(C / 256) in scope, for C <= ROW_MAX_C (checked by
// the caller): the one switch over the row kernels' widths.
#define ROW_SWITCH(C, ...)                                                                       \
    switch (ceil_div(C, 256)) {                                                                  \
        case 1: { constexpr int K = 1; __VA_ARGS__; } break;                                     \
        case 2: { constexpr int K = 2; __VA_ARGS__; } break;                                     \
        case 3: { constexpr int K = 3; __VA_ARGS__; } break;                                     \
        case 4: { constexpr int K = 4; __VA_ARGS__; } break;                                     \
        case 5: { constexpr int K = 5; __VA_ARGS__; } break;                                     \
        case 6: { constexpr int K = 6; __VA_ARGS__; } break;                                     \
        case 7: { constexpr int K = 7; __VA_ARGS__; } break;                                     \
        default: { constexpr int K = 8; __VA_ARGS__; } break;                                    \
    }

// Launches kernel<K>, K = ceil(C / 256), for C <= ROW_MAX_C (checked by the caller).
#define ROW_DISPATCH(kernel, C, grid, block, smem, stream, ...) \
    ROW_SWITCH(C, kernel<K><<<grid, block, smem, stream>>>(__VA_ARGS__))

// Calls fn<K>(...), K = ceil(C / 256), for C <= ROW_MAX_C (checked by the caller): for launchers that
// pick their own grid.
#define ROW_DISPATCH_FN(fn, C, ...) ROW_SWITCH(C, fn<K>(__VA_ARGS__))

// SMs of the current device (for launchers that size their grid and have no GpuContext)
static inline int current_sm_count(void) {
    int dev = 0, sms = 0;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

// How many blocks of `threads` threads and `smem` bytes of dynamic shared memory of `kernel` are
// resident on the current GPU at once (one wave), between 1 and cap. Allows the kernel smem_max bytes
// first: the most any of its launches asks, the same on every call, so that threads sharing the GPU
// never lower the limit under another's launch.
template <typename Kernel>
static inline int one_wave_grid(Kernel kernel, int threads, size_t smem, size_t smem_max, int cap) {
    int per_sm = 0;
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max));
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    int grid = per_sm * current_sm_count();
    return grid < 1 ? 1 : grid > cap ? cap : grid;
}

// --- 128-bit packed vectors ------------------------------------------------------------------
// The elementwise kernels move 16 bytes per thread and access: 8 bf16 in one load or store instruction
// (ld/st.global.v4), the widest a thread can issue. Pointers must be 16-byte aligned: rows of C channels
// with C % 8 == 0 keep every row start so. The 8 values stay packed two to a 32-bit register (element
// 2j in the low half of word j) until read as floats: 4 registers a vector, not 8.
typedef struct __align__(16) { uint32_t w[4]; } Bf16x8;

__device__ __forceinline__ Bf16x8 load128(const bf16* p) {
    uint4 u = *(const uint4*)p;
    Bf16x8 x = {{u.x, u.y, u.z, u.w}};
    return x;
}
__device__ __forceinline__ void store128(bf16* p, Bf16x8 x) { *(uint4*)p = make_uint4(x.w[0], x.w[1], x.w[2], x.w[3]); }
__device__ __forceinline__ Bf16x8 zero128(void) {
    Bf16x8 x = {{0u, 0u, 0u, 0u}};
    return x;
}
// element i as fp32 (exact: a bf16 is the upper half of an fp32)
__device__ __forceinline__ float bf16x8_get(const Bf16x8& x, int i) {
    uint32_t u = x.w[i >> 1];
    return __uint_as_float(i & 1 ? u & 0xffff0000u : u << 16);
}
// 8 floats rounded to bf16 (round to nearest even), packed
__device__ __forceinline__ Bf16x8 bf16x8_from_floats(const float f[8]) {
    Bf16x8 x;
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);  // .x (f[2j]) in the low half
        x.w[j] = *(const uint32_t*)&h;
    }
    return x;
}

// The norms' forward: a warp's row `row` of C channels into registers x[K][8] (lane l holds the groups of
// 8 channels 8·(l + 32k), k < K, those below C; the others are left unset): x = a's row, or with b the
// residual sum bf16(a + b), stored to r's row and kept as rounded. Every load is issued before the first
// is used; group by group, each group's loads waited behind the previous group's store (which may alias
// them): K round trips to memory a row instead of one.
template <int K>
__device__ __forceinline__ void row_load_residual(float x[K][8], bf16* r, const bf16* a, const bf16* b, size_t row,
                                                  int C, int lane) {
    int groups = C / 8;
    Bf16x8 pa[K], pb[K];
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        pa[k] = pb[k] = zero128();
        if (gi >= groups) continue;
        pa[k] = load128(a + row * C + 8 * gi);
        if (b) pb[k] = load128(b + row * C + 8 * gi);
    }
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        if (gi >= groups) continue;
        for (int e = 0; e < 8; e++) x[k][e] = bf16x8_get(pa[k], e);
        if (b) {  // the residual sum, rounded to bf16 as it is stored
            for (int e = 0; e < 8; e++) x[k][e] += bf16x8_get(pb[k], e);
            Bf16x8 pr = bf16x8_from_floats(x[k]);
            store128(r + row * C + 8 * gi, pr);
            for (int e = 0; e < 8; e++) x[k][e] = bf16x8_get(pr, e);
        }
    }
}

// The norms' backward: a warp's groups of 8 channels (as row_load_residual's, groups = C / 8 of them in a
// row) of the weight w, zero past the row's end.
template <int K>
__device__ __forceinline__ void row_load_weight(Bf16x8 wr[K], const bf16* w, int groups, int lane) {
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        wr[k] = gi < groups ? load128(w + 8 * gi) : zero128();
    }
}

// ... and of row `row` of dout, x (inp) and dinp (its row dxrow), loaded together (zero past the row's end).
template <int K>
__device__ __forceinline__ void row_load_backward(Bf16x8 dr[K], Bf16x8 xr[K], Bf16x8 dx[K], const bf16* dout,
                                                  const bf16* inp, const bf16* dxrow, int row, int C, int lane) {
    const bf16* drow = dout + (size_t)row * C;
    const bf16* xrow = inp + (size_t)row * C;
    int groups = C / 8;
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        dr[k] = xr[k] = dx[k] = zero128();
        if (gi < groups) { dr[k] = load128(drow + 8 * gi); xr[k] = load128(xrow + 8 * gi); dx[k] = load128(dxrow + 8 * gi); }
    }
}
